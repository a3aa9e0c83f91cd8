// Package persistentvolumeclaim is the core/v1 persistentvolumeclaims resource: its
// strategy (defaulting, validation, kubectl's columns) and persistentvolumeclaims/status.
// Mirrors k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim and
// ValidatePersistentVolumeClaim in pkg/apis/core/validation.
package persistentvolumeclaim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/persistentvolume"
)

// Strategy is the persistentvolumeclaims strategy. Mirrors persistentvolumeclaimStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of persistentvolumeclaims/status: only status changes.
// Mirrors persistentvolumeclaimStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills core/v1's defaults: volumeMode Filesystem, status.phase Pending.
// Mirrors SetDefaults_PersistentVolumeClaim and SetDefaults_PersistentVolumeClaimSpec.
func SetDefaults(pvc *corev1.PersistentVolumeClaim) {
	if pvc.Spec.VolumeMode == nil {
		pvc.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	}
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = corev1.ClaimPending
	}
}

// PrepareForCreate clears status (leaving phase Pending, as a client reads it back from
// kube) and fills defaults. Mirrors persistentvolumeclaimStrategy.PrepareForCreate.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	pvc.Status = corev1.PersistentVolumeClaimStatus{}
	dropVolumeAttributesClass(pvc, nil)
	SetDefaults(pvc)
}

// dropVolumeAttributesClass clears spec.volumeAttributesClassName unless the stored
// claim already had one, as kube-apiserver 1.32 does with the VolumeAttributesClass
// feature gate off (its default): skiff serves no VolumeAttributesClasses and changes no
// volume's attributes, so the field is not kept to be ignored. Mirrors
// dropDisabledVolumeAttributesClassFields.
func dropVolumeAttributesClass(pvc, old *corev1.PersistentVolumeClaim) {
	if old == nil || old.Spec.VolumeAttributesClassName == nil {
		pvc.Spec.VolumeAttributesClassName = nil
	}
}

// PrepareForUpdate keeps the stored status and fills defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	oldPVC := old.(*corev1.PersistentVolumeClaim)
	pvc.Status = oldPVC.Status
	dropVolumeAttributesClass(pvc, oldPVC)
	SetDefaults(pvc)
}

// Validate checks a new claim: a DNS-subdomain name and a valid spec (see ValidateSpec).
// Mirrors ValidatePersistentVolumeClaim.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	allErrs := apivalidation.ValidateObjectMeta(&pvc.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, ValidateSpec(&pvc.Spec, field.NewPath("spec"))...)
}

// ValidateSpec checks a claim's spec at fldPath: access modes ("at least 1 access mode is
// required"), a valid selector, resources.requests[storage] present ("Required value")
// and greater than zero, a DNS-subdomain storageClassName, a supported volumeMode, and
// dataSource / dataSourceRef naming a kind and a name, a core-group one a
// PersistentVolumeClaim. Mirrors ValidatePersistentVolumeClaimSpec.
func ValidateSpec(spec *corev1.PersistentVolumeClaimSpec, fldPath *field.Path) field.ErrorList {
	allErrs := persistentvolume.ValidateAccessModes(spec.AccessModes, "at least 1 access mode is required", fldPath.Child("accessModes"))
	if spec.Selector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))...)
	}
	storagePath := fldPath.Child("resources").Key(string(corev1.ResourceStorage))
	if q, ok := spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		allErrs = append(allErrs, field.Required(storagePath, ""))
	} else {
		allErrs = append(allErrs, persistentvolume.ValidatePositiveQuantity(q, storagePath)...)
	}
	if name := ptr.Deref(spec.StorageClassName, ""); name != "" {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("storageClassName"), name, msg))
		}
	}
	if spec.VolumeMode != nil && !persistentvolume.SupportedVolumeModes.Has(*spec.VolumeMode) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("volumeMode"), *spec.VolumeMode, sets.List(persistentvolume.SupportedVolumeModes)))
	}
	if ds := spec.DataSource; ds != nil {
		allErrs = append(allErrs, validateDataSource(ds.APIGroup, ds.Kind, ds.Name, fldPath.Child("dataSource"))...)
	}
	if ds := spec.DataSourceRef; ds != nil {
		allErrs = append(allErrs, validateDataSource(ds.APIGroup, ds.Kind, ds.Name, fldPath.Child("dataSourceRef"))...)
	}
	return allErrs
}

// validateDataSource: name and kind are required; with no apiGroup the kind must be
// PersistentVolumeClaim. Mirrors validateDataSource.
func validateDataSource(apiGroup *string, kind, name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	}
	if kind == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), ""))
	}
	if ptr.Deref(apiGroup, "") == "" && kind != "" && kind != "PersistentVolumeClaim" {
		allErrs = append(allErrs, field.Invalid(fldPath, kind, "must be 'PersistentVolumeClaim' when referencing the default apiGroup"))
	}
	return allErrs
}

// immutableMsg is kube's refusal of a claim spec change.
const immutableMsg = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"

// ValidateUpdate checks an update: a valid claim whose spec did not change ("spec:
// Forbidden: spec is immutable after creation except resources.requests and
// volumeAttributesClassName for bound claims"), save volumeName set once (by the PV
// controller), storageClassName set once from nil, volumeAttributesClassName, and, for a
// Bound claim, resources.requests[storage] growing (never shrinking: "field can not be
// less than previous value"). Mirrors ValidatePersistentVolumeClaimUpdate.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	pvc, oldPVC := obj.(*corev1.PersistentVolumeClaim), old.(*corev1.PersistentVolumeClaim)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pvc.ObjectMeta, &oldPVC.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateSpec(&pvc.Spec, field.NewPath("spec"))...)
	newSpec, oldSpec := pvc.Spec.DeepCopy(), oldPVC.Spec.DeepCopy()
	if oldSpec.VolumeName == "" {
		oldSpec.VolumeName = newSpec.VolumeName
	}
	if oldSpec.StorageClassName == nil && oldPVC.Annotations[persistentvolume.BetaStorageClassAnnotation] == "" {
		oldSpec.StorageClassName = newSpec.StorageClassName
	}
	oldSpec.VolumeAttributesClassName = newSpec.VolumeAttributesClassName
	if pvc.Status.Phase == corev1.ClaimBound && newSpec.Resources.Requests != nil {
		if q, ok := oldSpec.Resources.Requests[corev1.ResourceStorage]; ok {
			newSpec.Resources.Requests[corev1.ResourceStorage] = q
		}
	}
	if !apiequality.Semantic.DeepEqual(newSpec, oldSpec) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec"), immutableMsg))
	}
	newSize, oldSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage], oldPVC.Spec.Resources.Requests[corev1.ResourceStorage]
	if newSize.Cmp(oldSize) < 0 {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "resources", "requests", "storage"), "field can not be less than previous value"))
	}
	return allErrs
}

// GetAttrs returns labels and the metadata fields, the only selectable ones.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, nil, fmt.Errorf("not a persistentvolumeclaim: %T", obj)
	}
	return labels.Set(pvc.Labels), registry.ObjectMetaFieldsSet(&pvc.ObjectMeta, true), nil
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// TableColumns are NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS
// VOLUMEATTRIBUTESCLASS AGE, and wide VOLUMEMODE. Mirrors the printer's
// persistentVolumeClaimColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	status := corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Status", Type: "string", Description: status["phase"]},
		{Name: "Volume", Type: "string", Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]},
		{Name: "Capacity", Type: "string", Description: status["capacity"]},
		{Name: "Access Modes", Type: "string", Description: status["accessModes"]},
		{Name: "StorageClass", Type: "string", Description: "StorageClass of the pvc"},
		{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pvc"},
		registry.AgeColumn,
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"]},
	}
}

// TableRow prints one claim: CAPACITY and ACCESS MODES come from status once the claim
// names a volume; STATUS is Terminating while it is being deleted. Mirrors
// printPersistentVolumeClaim.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	phase := string(pvc.Status.Phase)
	if pvc.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	capacity, modes := "", ""
	if pvc.Spec.VolumeName != "" {
		modes = persistentvolume.AccessModesAsString(pvc.Status.AccessModes)
		q := pvc.Status.Capacity[corev1.ResourceStorage]
		capacity = q.String()
	}
	vac, mode := "<unset>", "<unset>"
	if pvc.Spec.VolumeAttributesClassName != nil {
		vac = *pvc.Spec.VolumeAttributesClassName
	}
	if pvc.Spec.VolumeMode != nil {
		mode = string(*pvc.Spec.VolumeMode)
	}
	return []interface{}{pvc.Name, phase, pvc.Spec.VolumeName, capacity, modes, Class(pvc), vac,
		registry.TranslateTimestampSince(pvc.CreationTimestamp), mode}
}

// Class is a claim's storage class: the beta annotation when present, else
// spec.storageClassName, else "". Mirrors GetPersistentVolumeClaimClass.
func Class(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[persistentvolume.BetaStorageClassAnnotation]; ok {
		return c
	}
	return ptr.Deref(pvc.Spec.StorageClassName, "")
}

// GetResetFields: persistentvolumeclaims/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.PersistentVolumeClaim).Spec = old.(*corev1.PersistentVolumeClaim).Spec
}

// ValidateUpdate checks the metadata update and a capacity not negative. Mirrors
// ValidatePersistentVolumeClaimStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pvc, oldPVC := obj.(*corev1.PersistentVolumeClaim), old.(*corev1.PersistentVolumeClaim)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pvc.ObjectMeta, &oldPVC.ObjectMeta, field.NewPath("metadata"))
	capPath := field.NewPath("status", "capacity")
	for name, q := range pvc.Status.Capacity {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(capPath.Key(string(name)), q.String(), "must be greater than or equal to 0"))
		}
	}
	return allErrs
}
