// Package csinode is the storage.k8s.io/v1 csinodes resource: cluster-scoped CSINodes,
// one per node, named after it, listing the CSI drivers registered on that node with the
// node's ID in each driver, the topology keys it reports and how many volumes it may
// attach. A kubelet writes its own (the NodeRestriction admission plugin and the Node
// authorizer keep it to that one); skiff's kubelets run no CSI driver and write none.
// Mirrors k8s.io/kubernetes/pkg/registry/storage/csinode and ValidateCSINode in
// pkg/apis/storage/validation.
package csinode

import (
	"context"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/storage/csidriver"
)

// Descriptor serves storage.k8s.io/v1 csinodes (kubectl: csinodes, no short name), at
// /registry/csinodes/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: storagev1.SchemeGroupVersion,
	Resource:     "csinodes",
	SingularName: "csinode",
	Kind:         "CSINode",
	NewFunc:      func() runtime.Object { return &storagev1.CSINode{} },
	NewListFunc:  func() runtime.Object { return &storagev1.CSINodeList{} },
	Strategy:     Strategy{},
}

// MaxNodeIDLength is the longest node ID a driver entry may carry: kube's apiserver
// accepts 256 characters (CSINodeValidationOptions.AllowLongNodeID), its kubelet writes at
// most 192.
const MaxNodeIDLength = 256

// Strategy is the csinodes strategy. Mirrors csiNodeStrategy.
type Strategy struct{}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: CSINodes are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate drops status, which storage.k8s.io/v1 gained after Kubernetes 1.32:
// skiff serves the 1.32 API, whose apiserver keeps none.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*storagev1.CSINode).Status = storagev1.CSINodeStatus{}
}

// PrepareForUpdate drops status, as on create.
func (Strategy) PrepareForUpdate(_ context.Context, obj, _ runtime.Object) {
	obj.(*storagev1.CSINode).Status = storagev1.CSINodeStatus{}
}

// Validate checks a new CSINode (see ValidateCSINode).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateCSINode(obj.(*storagev1.CSINode))
}

// ValidateCSINode checks a CSINode: a DNS-subdomain name (a node's) and each driver
// entry: a valid CSI driver name, once per CSINode ("Duplicate value"); a nodeID, required
// and at most 256 characters ("must be 256 characters or less"); allocatable.count not
// negative; topology keys non-empty, each once and a qualified name (the errors are at
// spec.drivers[i], as kube's). Mirrors ValidateCSINode.
func ValidateCSINode(n *storagev1.CSINode) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	names := sets.New[string]()
	for i, d := range n.Spec.Drivers {
		p := field.NewPath("spec", "drivers").Index(i)
		allErrs = append(allErrs, csidriver.ValidateDriverName(d.Name, p.Child("name"))...)
		if d.NodeID == "" {
			allErrs = append(allErrs, field.Required(p.Child("nodeID"), ""))
		}
		if len(d.NodeID) > MaxNodeIDLength {
			allErrs = append(allErrs, field.Invalid(p.Child("nodeID"), d.NodeID, fmt.Sprintf("must be %d characters or less", MaxNodeIDLength)))
		}
		if a := d.Allocatable; a != nil && a.Count != nil {
			allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(*a.Count), p.Child("allocatable", "count"))...)
		}
		if names.Has(d.Name) {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), d.Name))
		}
		names.Insert(d.Name)
		keys := sets.New[string]()
		for _, key := range d.TopologyKeys {
			if key == "" {
				allErrs = append(allErrs, field.Required(p, key))
			}
			if keys.Has(key) {
				allErrs = append(allErrs, field.Duplicate(p, key))
			}
			keys.Insert(key)
			allErrs = append(allErrs, metav1validation.ValidateLabelName(key, p)...)
		}
	}
	return allErrs
}

// ValidateUpdate checks the metadata update, the new CSINode, and that no driver entry
// present before and after changed ("CSINodeDriver: Invalid value: ...: field is
// immutable"); entries may be added and removed. Mirrors ValidateCSINodeUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	n, oldN := obj.(*storagev1.CSINode), old.(*storagev1.CSINode)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &oldN.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateCSINode(n)...)
	for _, oldD := range oldN.Spec.Drivers {
		for _, d := range n.Spec.Drivers {
			if d.Name == oldD.Name && !apiequality.Semantic.DeepEqual(d, oldD) {
				allErrs = append(allErrs, field.Invalid(field.NewPath("CSINodeDriver"), d, "field is immutable"))
			}
		}
	}
	return allErrs
}

// AllowUnconditionalUpdate is false, as kube's: an update must name the resourceVersion
// it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	n, ok := obj.(*storagev1.CSINode)
	if !ok {
		return nil, nil, fmt.Errorf("not a CSINode: %T", obj)
	}
	return labels.Set(n.Labels), registry.ObjectMetaFieldsSet(&n.ObjectMeta, false), nil
}

// TableColumns are NAME DRIVERS AGE. Mirrors the printer's csiNodeColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Drivers", Type: "integer", Description: "Drivers indicates the number of CSI drivers registered on the node"},
		registry.AgeColumn,
	}
}

// TableRow prints one CSINode: DRIVERS is how many it lists. Mirrors printCSINode.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	n := obj.(*storagev1.CSINode)
	return []interface{}{n.Name, int64(len(n.Spec.Drivers)), registry.TranslateTimestampSince(n.CreationTimestamp)}
}
