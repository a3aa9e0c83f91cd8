// Package csistoragecapacity is the storage.k8s.io/v1 csistoragecapacities resource:
// namespaced CSIStorageCapacities, each the answer of one CSI GetCapacity call, the
// capacity a StorageClass has in one topology segment (nodeTopology). A CSI driver's
// external-provisioner writes them and a scheduler reads them for drivers that ask for
// capacity-aware scheduling; skiff runs neither, so the objects are served and kept as
// written. Mirrors k8s.io/kubernetes/pkg/registry/storage/csistoragecapacity and
// ValidateCSIStorageCapacity in pkg/apis/storage/validation.
package csistoragecapacity

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
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
)

// Descriptor serves storage.k8s.io/v1 csistoragecapacities (kubectl:
// csistoragecapacities, no short name), namespaced, at
// /registry/csistoragecapacities/<namespace>/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: storagev1.SchemeGroupVersion,
	Resource:     "csistoragecapacities",
	SingularName: "csistoragecapacity",
	Kind:         "CSIStorageCapacity",
	NewFunc:      func() runtime.Object { return &storagev1.CSIStorageCapacity{} },
	NewListFunc:  func() runtime.Object { return &storagev1.CSIStorageCapacityList{} },
	Strategy:     Strategy{},
}

// Strategy is the csistoragecapacities strategy: nothing is defaulted or cleared.
// Mirrors csiStorageCapacityStrategy.
type Strategy struct{}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the object as sent: it has no status.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the object as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks a new CSIStorageCapacity (see ValidateCSIStorageCapacity).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateCSIStorageCapacity(obj.(*storagev1.CSIStorageCapacity), false)
}

// ValidateCSIStorageCapacity checks a CSIStorageCapacity: a DNS-subdomain name in a
// namespace; nodeTopology a well-formed label selector (its label values checked unless
// allowInvalidLabelValues); storageClassName a DNS subdomain, as a StorageClass's name
// ("storageClassName: Invalid value: \"\": a lowercase RFC 1123 subdomain ..." when
// empty); capacity not negative ("must be greater than or equal to 0").
// maximumVolumeSize is not checked, as kube 1.32 does not. Mirrors
// ValidateCSIStorageCapacity.
func ValidateCSIStorageCapacity(c *storagev1.CSIStorageCapacity, allowInvalidLabelValues bool) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&c.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	opts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: allowInvalidLabelValues}
	allErrs = append(allErrs, metav1validation.ValidateLabelSelector(c.NodeTopology, opts, field.NewPath("nodeTopology"))...)
	for _, msg := range apivalidation.NameIsDNSSubdomain(c.StorageClassName, false) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("storageClassName"), c.StorageClassName, msg))
	}
	if c.Capacity != nil && c.Capacity.Sign() < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("capacity"), c.Capacity.String(), "must be greater than or equal to 0"))
	}
	return allErrs
}

// ValidateUpdate checks the metadata update, the new object (a nodeTopology whose label
// values were already invalid when stored is still accepted, as kube's
// hasInvalidLabelValueInLabelSelector allows), and that nodeTopology and
// storageClassName, the inputs of the GetCapacity call, did not change ("field is
// immutable"). Mirrors ValidateCSIStorageCapacityUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	c, oldC := obj.(*storagev1.CSIStorageCapacity), old.(*storagev1.CSIStorageCapacity)
	oldInvalid := len(metav1validation.ValidateLabelSelector(oldC.NodeTopology, metav1validation.LabelSelectorValidationOptions{}, nil)) > 0
	allErrs := ValidateCSIStorageCapacity(c, oldInvalid)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &oldC.ObjectMeta, field.NewPath("metadata"))...)
	if !apiequality.Semantic.DeepEqual(c.NodeTopology, oldC.NodeTopology) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("nodeTopology"), c.NodeTopology, "field is immutable"))
	}
	if c.StorageClassName != oldC.StorageClassName {
		allErrs = append(allErrs, field.Invalid(field.NewPath("storageClassName"), c.StorageClassName, "field is immutable"))
	}
	return allErrs
}

// AllowUnconditionalUpdate is false, as kube's: an update must name the resourceVersion
// it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	c, ok := obj.(*storagev1.CSIStorageCapacity)
	if !ok {
		return nil, nil, fmt.Errorf("not a CSIStorageCapacity: %T", obj)
	}
	return labels.Set(c.Labels), registry.ObjectMetaFieldsSet(&c.ObjectMeta, true), nil
}

// TableColumns are NAME STORAGECLASSNAME CAPACITY, without AGE, as kube prints them.
// Mirrors the printer's csiStorageCapacityColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	doc := storagev1.CSIStorageCapacity{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "StorageClassName", Type: "string", Description: doc["storageClassName"]},
		{Name: "Capacity", Type: "string", Description: doc["capacity"]},
	}
}

// TableRow prints one CSIStorageCapacity: CAPACITY "<unset>" without capacity. Mirrors
// printCSIStorageCapacity.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	c := obj.(*storagev1.CSIStorageCapacity)
	capacity := "<unset>"
	if c.Capacity != nil {
		capacity = c.Capacity.String()
	}
	return []interface{}{c.Name, c.StorageClassName, capacity}
}
