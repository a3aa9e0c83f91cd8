// Package persistentvolume is the core/v1 persistentvolumes resource: its strategy
// (defaulting, validation, kubectl's columns), persistentvolumes/status, and the helpers
// persistentvolumeclaims share with it (access modes, their printed form). Mirrors
// k8s.io/kubernetes/pkg/registry/core/persistentvolume and ValidatePersistentVolume in
// pkg/apis/core/validation.
package persistentvolume

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
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
)

// BetaStorageClassAnnotation is the annotation that named a PV's or PVC's class before
// spec.storageClassName; it still wins over the field. Mirrors
// v1.BetaStorageClassAnnotation.
const BetaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"

// Strategy is the persistentvolumes strategy. Mirrors persistentvolumeStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of persistentvolumes/status: only status changes.
// Mirrors persistentvolumeStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// now is the clock of lastPhaseTransitionTime; tests may replace it.
var now = func() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

// NamespaceScoped is false: PersistentVolumes are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults fills core/v1's defaults: persistentVolumeReclaimPolicy Retain, volumeMode
// Filesystem, status.phase Pending, a hostPath's type "" (HostPathUnset). Mirrors
// SetDefaults_PersistentVolume and SetDefaults_HostPathVolumeSource.
func SetDefaults(pv *corev1.PersistentVolume) {
	if pv.Status.Phase == "" {
		pv.Status.Phase = corev1.VolumePending
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if pv.Spec.VolumeMode == nil {
		pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	}
	if hp := pv.Spec.HostPath; hp != nil && hp.Type == nil {
		hp.Type = ptr.To(corev1.HostPathUnset)
	}
}

// PrepareForCreate resets status to phase Pending with lastPhaseTransitionTime now and
// fills defaults. Mirrors persistentvolumeStrategy.PrepareForCreate.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	pv := obj.(*corev1.PersistentVolume)
	t := now()
	pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending, LastPhaseTransitionTime: &t}
	SetDefaults(pv)
}

// PrepareForUpdate keeps the stored status and fills defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	pv := obj.(*corev1.PersistentVolume)
	pv.Status = old.(*corev1.PersistentVolume).Status
	SetDefaults(pv)
}

// Validate checks a new PersistentVolume (see ValidatePersistentVolume).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidatePersistentVolume(obj.(*corev1.PersistentVolume))
}

// ValidateUpdate checks an update: a valid PersistentVolume whose volume source
// ("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is forbidden")
// and volumeMode did not change, and whose nodeAffinity, once set, did not change.
// Everything else in the spec (capacity, accessModes, claimRef, reclaim policy, class,
// mount options) may change. Mirrors ValidatePersistentVolumeUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pv, oldPV := obj.(*corev1.PersistentVolume), old.(*corev1.PersistentVolume)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pv.ObjectMeta, &oldPV.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidatePersistentVolume(pv)...)
	if !apiequality.Semantic.DeepEqual(pv.Spec.PersistentVolumeSource, oldPV.Spec.PersistentVolumeSource) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "persistentvolumesource"), "spec.persistentvolumesource is forbidden"))
	}
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(pv.Spec.VolumeMode, oldPV.Spec.VolumeMode, field.NewPath("volumeMode"))...)
	if oldPV.Spec.NodeAffinity != nil && !apiequality.Semantic.DeepEqual(pv.Spec.NodeAffinity, oldPV.Spec.NodeAffinity) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("nodeAffinity"), "", apivalidation.FieldImmutableErrorMsg))
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name, the only selectable field. Mirrors
// PersistentVolumeToSelectableFields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return nil, nil, fmt.Errorf("not a persistentvolume: %T", obj)
	}
	return labels.Set(pv.Labels), registry.ObjectMetaFieldsSet(&pv.ObjectMeta, false), nil
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// TableColumns are NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS
// VOLUMEATTRIBUTESCLASS REASON AGE, and wide VOLUMEMODE. Mirrors the printer's
// persistentVolumeColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	spec := corev1.PersistentVolumeSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Capacity", Type: "string", Description: spec["capacity"]},
		{Name: "Access Modes", Type: "string", Description: spec["accessModes"]},
		{Name: "Reclaim Policy", Type: "string", Description: spec["persistentVolumeReclaimPolicy"]},
		{Name: "Status", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]},
		{Name: "Claim", Type: "string", Description: spec["claimRef"]},
		{Name: "StorageClass", Type: "string", Description: "StorageClass of the pv"},
		{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pv"},
		{Name: "Reason", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]},
		registry.AgeColumn,
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: spec["volumeMode"]},
	}
}

// TableRow prints one PersistentVolume: CLAIM is namespace/name of claimRef, STATUS is
// Terminating once the volume is being deleted. Mirrors printPersistentVolume.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	pv := obj.(*corev1.PersistentVolume)
	claim := ""
	if ref := pv.Spec.ClaimRef; ref != nil {
		claim = ref.Namespace + "/" + ref.Name
	}
	phase := string(pv.Status.Phase)
	if pv.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	return []interface{}{
		pv.Name, size.String(), AccessModesAsString(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
		phase, claim, Class(pv), unsetOr(pv.Spec.VolumeAttributesClassName), pv.Status.Reason,
		registry.TranslateTimestampSince(pv.CreationTimestamp), unsetOr((*string)(pv.Spec.VolumeMode)),
	}
}

// unsetOr is *s, or "<unset>" for nil, as kube's printers show optional classes.
func unsetOr(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

// Class is a PersistentVolume's storage class: the beta annotation when present, else
// spec.storageClassName. Mirrors GetPersistentVolumeClass.
func Class(pv *corev1.PersistentVolume) string {
	if c, ok := pv.Annotations[BetaStorageClassAnnotation]; ok {
		return c
	}
	return pv.Spec.StorageClassName
}

// AccessModesAsString prints access modes as kubectl does: RWO, ROX, RWX, RWOP in that
// order, comma separated, each once. Mirrors GetAccessModesAsString.
func AccessModesAsString(modes []corev1.PersistentVolumeAccessMode) string {
	has := sets.New(modes...)
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		if has.Has(m.mode) {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

// GetResetFields: persistentvolumes/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec and sets lastPhaseTransitionTime to now when
// the phase changes (unless the writer set it). Mirrors
// persistentvolumeStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	pv, oldPV := obj.(*corev1.PersistentVolume), old.(*corev1.PersistentVolume)
	pv.Spec = oldPV.Spec
	if pv.Status.Phase != oldPV.Status.Phase &&
		(pv.Status.LastPhaseTransitionTime == nil || apiequality.Semantic.DeepEqual(pv.Status.LastPhaseTransitionTime, oldPV.Status.LastPhaseTransitionTime)) {
		t := now()
		pv.Status.LastPhaseTransitionTime = &t
	}
}

// ValidateUpdate checks the metadata update and a supported phase. Mirrors
// ValidatePersistentVolumeStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pv, oldPV := obj.(*corev1.PersistentVolume), old.(*corev1.PersistentVolume)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&pv.ObjectMeta, &oldPV.ObjectMeta, field.NewPath("metadata"))
	if p := pv.Status.Phase; p != "" && !supportedPhases.Has(p) {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("status", "phase"), p, sets.List(supportedPhases)))
	}
	return allErrs
}

var (
	supportedPhases = sets.New(corev1.VolumePending, corev1.VolumeAvailable, corev1.VolumeBound, corev1.VolumeReleased, corev1.VolumeFailed)
	// SupportedAccessModes are the access modes a PV or PVC may ask for.
	SupportedAccessModes = sets.New(corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod)
	// SupportedVolumeModes are Block and Filesystem.
	SupportedVolumeModes     = sets.New(corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem)
	supportedReclaimPolicies = sets.New(corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle, corev1.PersistentVolumeReclaimRetain)
	supportedHostPathTypes   = sets.New(corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory,
		corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev)
)

// ValidateAccessModes checks access modes at fldPath: at least one (PVs: "Required
// value"; claims pass their own message), each supported, ReadWriteOncePod alone.
// Mirrors the access-mode checks of ValidatePersistentVolumeSpec and
// ValidatePersistentVolumeClaimSpec.
func ValidateAccessModes(modes []corev1.PersistentVolumeAccessMode, requiredMsg string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(modes) == 0 {
		return field.ErrorList{field.Required(fldPath, requiredMsg)}
	}
	rwop, other := false, false
	for _, mode := range modes {
		switch {
		case !SupportedAccessModes.Has(mode):
			allErrs = append(allErrs, field.NotSupported(fldPath, mode, sets.List(SupportedAccessModes)))
		case mode == corev1.ReadWriteOncePod:
			rwop = true
		default:
			other = true
		}
	}
	if rwop && other {
		allErrs = append(allErrs, field.Forbidden(fldPath, "may not use ReadWriteOncePod with other access modes"))
	}
	return allErrs
}

// ValidatePersistentVolume checks a PersistentVolume: a DNS-subdomain name; access
// modes; capacity holding storage alone ("spec.capacity: Required value", "Unsupported
// value") greater than zero; a supported reclaim policy (Recycle not with hostPath "/");
// a DNS-subdomain storageClassName; a supported volumeMode; exactly one volume source
// ("spec: Required value: must specify a volume type", "may not specify more than 1
// volume type"), hostPath and local with a path without ".." and hostPath a supported
// type; a local volume needs nodeAffinity ("spec.nodeAffinity: Required value: Local
// volume requires node affinity"), which needs required node selector terms; claimRef
// names a claim. Mirrors ValidatePersistentVolume and ValidatePersistentVolumeSpec.
func ValidatePersistentVolume(pv *corev1.PersistentVolume) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&pv.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, specPath := &pv.Spec, field.NewPath("spec")
	allErrs = append(allErrs, ValidateAccessModes(spec.AccessModes, "", specPath.Child("accessModes"))...)

	capPath := specPath.Child("capacity")
	if len(spec.Capacity) == 0 {
		allErrs = append(allErrs, field.Required(capPath, ""))
	} else if _, ok := spec.Capacity[corev1.ResourceStorage]; !ok || len(spec.Capacity) > 1 {
		allErrs = append(allErrs, field.NotSupported(capPath, spec.Capacity, []corev1.ResourceName{corev1.ResourceStorage}))
	}
	for name, q := range spec.Capacity {
		allErrs = append(allErrs, ValidatePositiveQuantity(q, capPath.Key(string(name)))...)
	}
	if p := spec.PersistentVolumeReclaimPolicy; p != "" && !supportedReclaimPolicies.Has(p) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("persistentVolumeReclaimPolicy"), p, sets.List(supportedReclaimPolicies)))
	}
	if spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRecycle && spec.HostPath != nil && path.Clean(spec.HostPath.Path) == "/" {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("persistentVolumeReclaimPolicy"), "may not be 'recycle' for a hostPath mount of '/'"))
	}
	if name := spec.StorageClassName; name != "" {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			allErrs = append(allErrs, field.Invalid(specPath.Child("storageClassName"), name, msg))
		}
	}
	if spec.VolumeMode != nil && !SupportedVolumeModes.Has(*spec.VolumeMode) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("volumeMode"), *spec.VolumeMode, sets.List(SupportedVolumeModes)))
	}
	allErrs = append(allErrs, validateSource(spec, specPath)...)

	if spec.NodeAffinity != nil {
		allErrs = append(allErrs, validateNodeAffinity(spec.NodeAffinity, specPath.Child("nodeAffinity"))...)
	} else if spec.Local != nil {
		allErrs = append(allErrs, field.Required(specPath.Child("nodeAffinity"), "Local volume requires node affinity"))
	}
	if ref := spec.ClaimRef; ref != nil && ref.Name == "" {
		allErrs = append(allErrs, field.Required(specPath.Child("claimRef", "name"), ""))
	}
	return allErrs
}

// ValidatePositiveQuantity refuses a quantity not above zero ("must be greater than
// zero"). Mirrors ValidatePositiveQuantityValue.
func ValidatePositiveQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than zero")}
	}
	return nil
}

// validateSource counts the volume sources set (exactly one is allowed) and checks the
// two skiff can mount, hostPath and local.
func validateSource(spec *corev1.PersistentVolumeSpec, specPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	s := &spec.PersistentVolumeSource
	sources := []struct {
		name string
		set  bool
	}{
		{"gcePersistentDisk", s.GCEPersistentDisk != nil}, {"awsElasticBlockStore", s.AWSElasticBlockStore != nil},
		{"hostPath", s.HostPath != nil}, {"glusterfs", s.Glusterfs != nil}, {"nfs", s.NFS != nil}, {"rbd", s.RBD != nil},
		{"quobyte", s.Quobyte != nil}, {"cephfs", s.CephFS != nil}, {"iscsi", s.ISCSI != nil}, {"cinder", s.Cinder != nil},
		{"fc", s.FC != nil}, {"flocker", s.Flocker != nil}, {"flexVolume", s.FlexVolume != nil}, {"azureFile", s.AzureFile != nil},
		{"vsphereVolume", s.VsphereVolume != nil}, {"azureDisk", s.AzureDisk != nil}, {"photonPersistentDisk", s.PhotonPersistentDisk != nil},
		{"portworxVolume", s.PortworxVolume != nil}, {"scaleIO", s.ScaleIO != nil}, {"local", s.Local != nil},
		{"storageos", s.StorageOS != nil}, {"csi", s.CSI != nil},
	}
	n := 0
	for _, src := range sources {
		if !src.set {
			continue
		}
		if n++; n > 1 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child(src.name), "may not specify more than 1 volume type"))
		}
	}
	if n == 0 {
		allErrs = append(allErrs, field.Required(specPath, "must specify a volume type"))
	}
	if hp := s.HostPath; hp != nil {
		p := specPath.Child("hostPath", "path")
		if hp.Path == "" {
			allErrs = append(allErrs, field.Required(p, ""))
		} else {
			allErrs = append(allErrs, validatePathNoBacksteps(hp.Path, p)...)
		}
		if hp.Type != nil && !supportedHostPathTypes.Has(*hp.Type) {
			allErrs = append(allErrs, field.NotSupported(specPath.Child("hostPath", "type"), *hp.Type, sets.List(supportedHostPathTypes)))
		}
	}
	if l := s.Local; l != nil {
		p := specPath.Child("local", "path")
		if l.Path == "" {
			allErrs = append(allErrs, field.Required(p, ""))
		} else {
			allErrs = append(allErrs, validatePathNoBacksteps(l.Path, p)...)
		}
	}
	return allErrs
}

// validatePathNoBacksteps refuses a path with a ".." element ("must not contain '..'").
// Mirrors validatePathNoBacksteps.
func validatePathNoBacksteps(p string, fldPath *field.Path) field.ErrorList {
	for _, item := range strings.Split(p, "/") {
		if item == ".." {
			return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'")}
		}
	}
	return nil
}

// validateNodeAffinity checks a volume's node affinity: required is required ("must
// specify required node constraints") and is a node selector with at least one term,
// each requirement a label key, a supported operator and the values it takes. Mirrors
// validateVolumeNodeAffinity and ValidateNodeSelector.
func validateNodeAffinity(na *corev1.VolumeNodeAffinity, fldPath *field.Path) field.ErrorList {
	reqPath := fldPath.Child("required")
	if na.Required == nil {
		return field.ErrorList{field.Required(reqPath, "must specify required node constraints")}
	}
	termsPath := reqPath.Child("nodeSelectorTerms")
	if len(na.Required.NodeSelectorTerms) == 0 {
		return field.ErrorList{field.Required(termsPath, "must have at least one node selector term")}
	}
	var allErrs field.ErrorList
	for i, term := range na.Required.NodeSelectorTerms {
		for j, req := range term.MatchExpressions {
			p := termsPath.Index(i).Child("matchExpressions").Index(j)
			allErrs = append(allErrs, validateRequirement(req, true, p)...)
		}
		for j, req := range term.MatchFields {
			p := termsPath.Index(i).Child("matchFields").Index(j)
			allErrs = append(allErrs, validateRequirement(req, false, p)...)
		}
	}
	return allErrs
}

// validateRequirement checks one node selector requirement: In and NotIn need values,
// Exists and DoesNotExist take none, Gt and Lt take one; the key is a label key (for
// matchFields, metadata.name with In or NotIn and one value). Mirrors
// ValidateNodeSelectorRequirement and ValidateNodeFieldSelectorRequirement.
func validateRequirement(req corev1.NodeSelectorRequirement, label bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	valuesPath := fldPath.Child("values")
	switch req.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(req.Values) == 0 {
			allErrs = append(allErrs, field.Required(valuesPath, "must be specified when `operator` is 'In' or 'NotIn'"))
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(req.Values) > 0 {
			allErrs = append(allErrs, field.Forbidden(valuesPath, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(req.Values) != 1 {
			allErrs = append(allErrs, field.Required(valuesPath, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
		}
	default:
		allErrs = append(allErrs, field.Invalid(fldPath.Child("operator"), req.Operator, "not a valid selector operator"))
	}
	if label {
		return append(allErrs, metav1validation.ValidateLabelName(req.Key, fldPath.Child("key"))...)
	}
	if req.Key != metav1.ObjectNameField {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("key"), req.Key, "not a valid field selector key"))
	}
	return allErrs
}
