// Package storageclass is the storage.k8s.io/v1 storageclasses resource: cluster-scoped
// StorageClasses naming a provisioner, its parameters, the reclaim policy and binding
// mode of the volumes it makes. skiff runs no provisioner yet: classes are served and
// matched by the PV controller for static binding. Mirrors
// k8s.io/kubernetes/pkg/registry/storage/storageclass and ValidateStorageClass in
// pkg/apis/storage/validation.
package storageclass

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
)

// Descriptor serves storage.k8s.io/v1 storageclasses (kubectl: storageclasses, sc), at
// /registry/storageclasses/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: storagev1.SchemeGroupVersion,
	Resource:     "storageclasses",
	SingularName: "storageclass",
	Kind:         "StorageClass",
	ShortNames:   []string{"sc"},
	NewFunc:      func() runtime.Object { return &storagev1.StorageClass{} },
	NewListFunc:  func() runtime.Object { return &storagev1.StorageClassList{} },
	Strategy:     Strategy{},
}

// IsDefaultAnnotation and BetaIsDefaultAnnotation mark the default class: a claim that
// names none gets it. Mirrors storageutil.IsDefaultStorageClassAnnotation.
const (
	IsDefaultAnnotation     = "storageclass.kubernetes.io/is-default-class"
	BetaIsDefaultAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

// IsDefault reports whether the class is annotated as the default ("true" in either
// annotation). Mirrors storageutil.IsDefaultAnnotation.
func IsDefault(meta metav1.ObjectMeta) bool {
	return meta.Annotations[IsDefaultAnnotation] == "true" || meta.Annotations[BetaIsDefaultAnnotation] == "true"
}

// Limits on parameters: at most 512 of them, 256 KiB of keys and values together.
const (
	maxParameters    = 512
	maxParameterSize = 256 * (1 << 10)
)

var (
	supportedReclaimPolicies = sets.New(string(corev1.PersistentVolumeReclaimDelete), string(corev1.PersistentVolumeReclaimRetain))
	supportedBindingModes    = sets.New(string(storagev1.VolumeBindingImmediate), string(storagev1.VolumeBindingWaitForFirstConsumer))
)

// Strategy is the storageclasses strategy. Mirrors storageClassStrategy.
type Strategy struct{}

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is false: StorageClasses are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults sets reclaimPolicy Delete and volumeBindingMode Immediate when unset.
// Mirrors SetDefaults_StorageClass.
func SetDefaults(sc *storagev1.StorageClass) {
	if sc.ReclaimPolicy == nil {
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
	}
	if sc.VolumeBindingMode == nil {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingImmediate)
	}
}

// PrepareForCreate fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	SetDefaults(obj.(*storagev1.StorageClass))
}

// PrepareForUpdate fills defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, _ runtime.Object) {
	SetDefaults(obj.(*storagev1.StorageClass))
}

// Validate checks a new StorageClass (see ValidateStorageClass).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateStorageClass(obj.(*storagev1.StorageClass))
}

// ValidateStorageClass checks a StorageClass: a DNS-subdomain name, a provisioner that
// is required and a qualified name ("provisioner: Required value"), parameters with
// non-empty keys, at most 512 and 256 KiB in all, a supported reclaimPolicy (Delete,
// Retain) and a volumeBindingMode (required, Immediate or WaitForFirstConsumer).
// Mirrors ValidateStorageClass.
func ValidateStorageClass(sc *storagev1.StorageClass) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&sc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	provPath := field.NewPath("provisioner")
	if sc.Provisioner == "" {
		allErrs = append(allErrs, field.Required(provPath, ""))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateLabelName(strings.ToLower(sc.Provisioner), provPath)...)
	}
	paramPath := field.NewPath("parameters")
	if len(sc.Parameters) > maxParameters {
		allErrs = append(allErrs, field.TooLong(paramPath, "Provisioner Parameters exceeded max allowed", maxParameters))
	} else {
		size := 0
		for k, v := range sc.Parameters {
			if k == "" {
				allErrs = append(allErrs, field.Invalid(paramPath, k, "field can not be empty."))
			}
			size += len(k) + len(v)
		}
		if size > maxParameterSize {
			allErrs = append(allErrs, field.TooLong(paramPath, "", maxParameterSize))
		}
	}
	if p := sc.ReclaimPolicy; p != nil && *p != "" && !supportedReclaimPolicies.Has(string(*p)) {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("reclaimPolicy"), *p, sets.List(supportedReclaimPolicies)))
	}
	modePath := field.NewPath("volumeBindingMode")
	if sc.VolumeBindingMode == nil {
		allErrs = append(allErrs, field.Required(modePath, ""))
	} else if !supportedBindingModes.Has(string(*sc.VolumeBindingMode)) {
		allErrs = append(allErrs, field.NotSupported(modePath, *sc.VolumeBindingMode, sets.List(supportedBindingModes)))
	}
	return allErrs
}

// ValidateUpdate checks the metadata update and that parameters, provisioner,
// reclaimPolicy ("updates to ... are forbidden.") and volumeBindingMode ("field is
// immutable") did not change. Mirrors ValidateStorageClassUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	sc, oldSC := obj.(*storagev1.StorageClass), old.(*storagev1.StorageClass)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&sc.ObjectMeta, &oldSC.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateStorageClass(sc)...)
	if !maps.Equal(sc.Parameters, oldSC.Parameters) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
	}
	if sc.Provisioner != oldSC.Provisioner {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden."))
	}
	if ptr.Deref(sc.ReclaimPolicy, "") != ptr.Deref(oldSC.ReclaimPolicy, "") {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden."))
	}
	return append(allErrs, apivalidation.ValidateImmutableField(sc.VolumeBindingMode, oldSC.VolumeBindingMode, field.NewPath("volumeBindingMode"))...)
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	sc, ok := obj.(*storagev1.StorageClass)
	if !ok {
		return nil, nil, fmt.Errorf("not a StorageClass: %T", obj)
	}
	return labels.Set(sc.Labels), registry.ObjectMetaFieldsSet(&sc.ObjectMeta, false), nil
}

// TableColumns are NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE
// ALLOWVOLUMEEXPANSION AGE. Mirrors the printer's storageClassColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	doc := storagev1.StorageClass{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Provisioner", Type: "string", Description: doc["provisioner"]},
		{Name: "ReclaimPolicy", Type: "string", Description: doc["reclaimPolicy"]},
		{Name: "VolumeBindingMode", Type: "string", Description: doc["volumeBindingMode"]},
		{Name: "AllowVolumeExpansion", Type: "string", Description: doc["allowVolumeExpansion"]},
		registry.AgeColumn,
	}
}

// TableRow prints one class: the default one's name ends in " (default)". Mirrors
// printStorageClass.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	sc := obj.(*storagev1.StorageClass)
	name := sc.Name
	if IsDefault(sc.ObjectMeta) {
		name += " (default)"
	}
	reclaim := string(corev1.PersistentVolumeReclaimDelete)
	if sc.ReclaimPolicy != nil {
		reclaim = string(*sc.ReclaimPolicy)
	}
	mode := string(storagev1.VolumeBindingImmediate)
	if sc.VolumeBindingMode != nil {
		mode = string(*sc.VolumeBindingMode)
	}
	return []interface{}{name, sc.Provisioner, reclaim, mode, ptr.Deref(sc.AllowVolumeExpansion, false),
		registry.TranslateTimestampSince(sc.CreationTimestamp)}
}
