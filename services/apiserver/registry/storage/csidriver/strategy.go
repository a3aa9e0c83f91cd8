// Package csidriver is the storage.k8s.io/v1 csidrivers resource: cluster-scoped
// CSIDrivers, each describing how Kubernetes talks to one CSI volume driver (whether it
// needs attaching, wants pod information or service account tokens on mount, reports
// storage capacity, which volume lifecycles and fsGroup policy it supports). skiff runs
// no CSI driver: the objects are served for drivers and tools that read them. Mirrors
// k8s.io/kubernetes/pkg/registry/storage/csidriver and ValidateCSIDriver in
// pkg/apis/storage/validation.
package csidriver

import (
	"context"
	"fmt"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
)

// Descriptor serves storage.k8s.io/v1 csidrivers (kubectl: csidrivers, no short name), at
// /registry/csidrivers/<name> (kube's key).
var Descriptor = registry.Descriptor{
	GroupVersion: storagev1.SchemeGroupVersion,
	Resource:     "csidrivers",
	SingularName: "csidriver",
	Kind:         "CSIDriver",
	NewFunc:      func() runtime.Object { return &storagev1.CSIDriver{} },
	NewListFunc:  func() runtime.Object { return &storagev1.CSIDriverList{} },
	Strategy:     Strategy{},
}

// Strategy is the csidrivers strategy. Mirrors csiDriverStrategy.
type Strategy struct{}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: CSIDrivers are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults fills storage/v1's defaults: attachRequired true, podInfoOnMount false,
// storageCapacity false, fsGroupPolicy ReadWriteOnceWithFSType, volumeLifecycleModes
// [Persistent], requiresRepublish false and seLinuxMount false (kube 1.32 defaults it:
// its SELinuxMountReadWriteOncePod gate is on). Mirrors SetDefaults_CSIDriver.
func SetDefaults(d *storagev1.CSIDriver) {
	s := &d.Spec
	if s.AttachRequired == nil {
		s.AttachRequired = ptr.To(true)
	}
	if s.PodInfoOnMount == nil {
		s.PodInfoOnMount = ptr.To(false)
	}
	if s.StorageCapacity == nil {
		s.StorageCapacity = ptr.To(false)
	}
	if s.FSGroupPolicy == nil {
		s.FSGroupPolicy = ptr.To(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	}
	if len(s.VolumeLifecycleModes) == 0 {
		s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if s.RequiresRepublish == nil {
		s.RequiresRepublish = ptr.To(false)
	}
	if s.SELinuxMount == nil {
		s.SELinuxMount = ptr.To(false)
	}
}

// dropNewerFields clears the spec fields storage.k8s.io/v1 gained after Kubernetes 1.32
// (nodeAllocatableUpdatePeriodSeconds, serviceAccountTokenInSecrets,
// preventPodSchedulingIfMissing): skiff serves the 1.32 API, whose apiserver does not
// know them and so keeps none of them.
func dropNewerFields(d *storagev1.CSIDriver) {
	d.Spec.NodeAllocatableUpdatePeriodSeconds = nil
	d.Spec.ServiceAccountTokenInSecrets = nil
	d.Spec.PreventPodSchedulingIfMissing = nil
}

// PrepareForCreate drops the fields 1.32 does not serve and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	d := obj.(*storagev1.CSIDriver)
	dropNewerFields(d)
	SetDefaults(d)
}

// PrepareForUpdate drops the fields 1.32 does not serve, fills defaults and bumps the
// generation when the spec changes. Mirrors csiDriverStrategy.PrepareForUpdate.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	d, oldD := obj.(*storagev1.CSIDriver), old.(*storagev1.CSIDriver)
	dropNewerFields(d)
	SetDefaults(d)
	if !apiequality.Semantic.DeepEqual(d.Spec, oldD.Spec) {
		d.Generation = oldD.Generation + 1
	}
}

// Validate checks a new CSIDriver (see ValidateCSIDriver).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateCSIDriver(obj.(*storagev1.CSIDriver))
}

// ValidateCSIDriver checks a CSIDriver: a DNS-subdomain name and a valid spec (see
// validateSpec). Mirrors ValidateCSIDriver.
func ValidateCSIDriver(d *storagev1.CSIDriver) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateSpec(&d.Spec, field.NewPath("spec"))...)
}

// ValidateUpdate checks the metadata update, the new spec, and that attachRequired and
// volumeLifecycleModes did not change ("field is immutable"; kube names the first
// spec.attachedRequired). podInfoOnMount, storageCapacity, fsGroupPolicy, tokenRequests,
// requiresRepublish and seLinuxMount may change. Mirrors ValidateCSIDriverUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	d, oldD := obj.(*storagev1.CSIDriver), old.(*storagev1.CSIDriver)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &oldD.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&d.Spec, field.NewPath("spec"))...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(d.Spec.AttachRequired, oldD.Spec.AttachRequired, field.NewPath("spec", "attachedRequired"))...)
	return append(allErrs, apivalidation.ValidateImmutableField(d.Spec.VolumeLifecycleModes, oldD.Spec.VolumeLifecycleModes, field.NewPath("spec", "volumeLifecycleModes"))...)
}

// AllowUnconditionalUpdate is false, as kube's: an update must name the resourceVersion
// it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

var supportedFSGroupPolicies = sets.New(string(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy), string(storagev1.FileFSGroupPolicy), string(storagev1.NoneFSGroupPolicy))

// minTokenExpiration is the shortest token a driver may ask for.
const minTokenExpiration = 10 * time.Minute

// validateSpec checks a spec at fldPath: attachRequired ("spec.attachedRequired: Required
// value", kube's path), podInfoOnMount, storageCapacity and seLinuxMount set; a supported
// fsGroupPolicy (File, None, ReadWriteOnceWithFSType); token requests each for another
// audience ("Duplicate value"), expiring in 10 minutes to 2^32 seconds; volume lifecycle
// modes Persistent or Ephemeral. Mirrors validateCSIDriverSpec.
func validateSpec(s *storagev1.CSIDriverSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, f := range []struct {
		set  bool
		name string
	}{{s.AttachRequired != nil, "attachedRequired"}, {s.PodInfoOnMount != nil, "podInfoOnMount"}, {s.StorageCapacity != nil, "storageCapacity"}} {
		if !f.set {
			allErrs = append(allErrs, field.Required(fldPath.Child(f.name), ""))
		}
	}
	if p := s.FSGroupPolicy; p != nil && !supportedFSGroupPolicies.Has(string(*p)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("fsGroupPolicy"), *p, sets.List(supportedFSGroupPolicies)))
	}
	audiences := sets.New[string]()
	for i, tr := range s.TokenRequests {
		p := fldPath.Child("tokenRequests").Index(i)
		if audiences.Has(tr.Audience) {
			allErrs = append(allErrs, field.Duplicate(p.Child("audience"), tr.Audience))
			continue
		}
		audiences.Insert(tr.Audience)
		if tr.ExpirationSeconds == nil {
			continue
		}
		if *tr.ExpirationSeconds < int64(minTokenExpiration.Seconds()) {
			allErrs = append(allErrs, field.Invalid(p.Child("expirationSeconds"), *tr.ExpirationSeconds, "may not specify a duration less than 10 minutes"))
		}
		if *tr.ExpirationSeconds > 1<<32 {
			allErrs = append(allErrs, field.Invalid(p.Child("expirationSeconds"), *tr.ExpirationSeconds, "may not specify a duration larger than 2^32 seconds"))
		}
	}
	for _, mode := range s.VolumeLifecycleModes {
		if mode != storagev1.VolumeLifecyclePersistent && mode != storagev1.VolumeLifecycleEphemeral {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("volumeLifecycleModes"), mode,
				[]string{string(storagev1.VolumeLifecyclePersistent), string(storagev1.VolumeLifecycleEphemeral)}))
		}
	}
	if s.SELinuxMount == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("seLinuxMount"), ""))
	}
	return allErrs
}

// ValidateDriverName checks a CSI driver's name where an object names one (a CSINode's
// drivers, a VolumeAttachment's attacher, a CSI volume's driver): required, at most 63
// characters, and, lowercased, a DNS subdomain. Mirrors ValidateCSIDriverName in
// pkg/apis/core/validation.
func ValidateDriverName(name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if name == "" {
		allErrs = append(allErrs, field.Required(fldPath, ""))
	}
	if len(name) > 63 {
		allErrs = append(allErrs, field.TooLong(fldPath, "", 63))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	d, ok := obj.(*storagev1.CSIDriver)
	if !ok {
		return nil, nil, fmt.Errorf("not a CSIDriver: %T", obj)
	}
	return labels.Set(d.Labels), registry.ObjectMetaFieldsSet(&d.ObjectMeta, false), nil
}

// TableColumns are NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS
// REQUIRESREPUBLISH MODES AGE. Mirrors the printer's csiDriverColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	doc := storagev1.CSIDriverSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "AttachRequired", Type: "boolean", Description: doc["attachRequired"]},
		{Name: "PodInfoOnMount", Type: "boolean", Description: doc["podInfoOnMount"]},
		{Name: "StorageCapacity", Type: "boolean", Description: doc["storageCapacity"]},
		{Name: "TokenRequests", Type: "string", Description: doc["tokenRequests"]},
		{Name: "RequiresRepublish", Type: "boolean", Description: doc["requiresRepublish"]},
		{Name: "Modes", Type: "string", Description: doc["volumeLifecycleModes"]},
		registry.AgeColumn,
	}
}

// TableRow prints one CSIDriver: TOKENREQUESTS the audiences comma separated ("<unset>"
// without tokenRequests), MODES the lifecycle modes ("<none>" without). Mirrors
// printCSIDriver.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	d := obj.(*storagev1.CSIDriver)
	modes := make([]string, 0, len(d.Spec.VolumeLifecycleModes))
	for _, m := range d.Spec.VolumeLifecycleModes {
		modes = append(modes, string(m))
	}
	modeList := strings.Join(modes, ",")
	if modeList == "" {
		modeList = "<none>"
	}
	tokens := "<unset>"
	if d.Spec.TokenRequests != nil {
		audiences := make([]string, 0, len(d.Spec.TokenRequests))
		for _, tr := range d.Spec.TokenRequests {
			audiences = append(audiences, tr.Audience)
		}
		tokens = strings.Join(audiences, ",")
	}
	return []interface{}{d.Name, ptr.Deref(d.Spec.AttachRequired, true), ptr.Deref(d.Spec.PodInfoOnMount, false),
		ptr.Deref(d.Spec.StorageCapacity, false), tokens, ptr.Deref(d.Spec.RequiresRepublish, false), modeList,
		registry.TranslateTimestampSince(d.CreationTimestamp)}
}
