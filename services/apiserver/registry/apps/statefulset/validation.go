package statefulset

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// ValidateStatefulSet checks a new StatefulSet: its metadata (the name a DNS label, as
// pod names <name>-<ordinal> must be) and its spec (see ValidateStatefulSetSpec). An
// empty list means valid; the apiserver answers any error with 422 Invalid. Mirrors
// ValidateStatefulSet.
func ValidateStatefulSet(set *appsv1.StatefulSet) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&set.ObjectMeta, true, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return append(allErrs, ValidateStatefulSetSpec(&set.Spec, field.NewPath("spec"))...)
}

// ValidateStatefulSetSpec checks a defaulted StatefulSet spec at fldPath, with kube's
// paths and messages:
//   - podManagementPolicy: Required, or "must be 'OrderedReady' or 'Parallel'";
//   - updateStrategy: Required type, or "must be 'RollingUpdate' or 'OnDelete'";
//     rollingUpdate with OnDelete: "only allowed for updateStrategy 'RollingUpdate'";
//     rollingUpdate.partition >= 0; rollingUpdate.maxUnavailable a non-negative integer
//     or a percentage, "cannot be 0", "must not be greater than 100%";
//   - persistentVolumeClaimRetentionPolicy.whenDeleted/whenScaled: Retain or Delete;
//   - replicas, minReadySeconds and ordinals.start >= 0;
//   - selector: Required, valid, non-empty ("empty selector is invalid for
//     statefulset"), matching spec.template.metadata.labels ("`selector` does not
//     match template `labels`");
//   - template: a valid pod template (labels, annotations, pod spec) whose
//     restartPolicy is Always and that sets no activeDeadlineSeconds;
//   - volumeClaimTemplates: each named by a unique DNS label, with a valid claim spec
//     (see validateVolumeClaimTemplate).
//
// serviceName is optional. Mirrors ValidateStatefulSetSpec; kube leaves the template's
// pod spec and the claim templates to be checked when the pods and claims are created,
// skiff refuses them up front.
func ValidateStatefulSetSpec(spec *appsv1.StatefulSetSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch spec.PodManagementPolicy {
	case "":
		allErrs = append(allErrs, field.Required(fldPath.Child("podManagementPolicy"), ""))
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		allErrs = append(allErrs, field.Invalid(fldPath.Child("podManagementPolicy"), spec.PodManagementPolicy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}

	strategyPath := fldPath.Child("updateStrategy")
	switch spec.UpdateStrategy.Type {
	case "":
		allErrs = append(allErrs, field.Required(strategyPath, ""))
	case appsv1.OnDeleteStatefulSetStrategyType:
		if spec.UpdateStrategy.RollingUpdate != nil {
			allErrs = append(allErrs, field.Invalid(strategyPath.Child("rollingUpdate"), spec.UpdateStrategy.RollingUpdate,
				fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if spec.UpdateStrategy.RollingUpdate != nil {
			allErrs = append(allErrs, validateRollingUpdate(spec.UpdateStrategy.RollingUpdate, strategyPath.Child("rollingUpdate"))...)
		}
	default:
		allErrs = append(allErrs, field.Invalid(strategyPath, spec.UpdateStrategy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}

	if p := spec.PersistentVolumeClaimRetentionPolicy; p != nil {
		policyPath := fldPath.Child("persistentVolumeClaimRetentionPolicy")
		allErrs = append(allErrs, validateRetentionPolicyType(p.WhenDeleted, policyPath.Child("whenDeleted"))...)
		allErrs = append(allErrs, validateRetentionPolicyType(p.WhenScaled, policyPath.Child("whenScaled"))...)
	}

	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(ptr.Deref(spec.Replicas, 0)), fldPath.Child("replicas"))...)
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(spec.MinReadySeconds), fldPath.Child("minReadySeconds"))...)
	if spec.Ordinals != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(spec.Ordinals.Start), fldPath.Child("ordinals.start"))...)
	}
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.RevisionHistoryLimit), fldPath.Child("revisionHistoryLimit"))...)
	}

	selPath := fldPath.Child("selector")
	if spec.Selector == nil {
		allErrs = append(allErrs, field.Required(selPath, ""))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, selPath)...)
		if len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
			allErrs = append(allErrs, field.Invalid(selPath, spec.Selector, "empty selector is invalid for statefulset"))
		}
	}
	tmplPath := fldPath.Child("template")
	if selector, err := metav1.LabelSelectorAsSelector(spec.Selector); err != nil {
		allErrs = append(allErrs, field.Invalid(selPath, spec.Selector, ""))
	} else if !selector.Empty() && !selector.Matches(labels.Set(spec.Template.Labels)) {
		allErrs = append(allErrs, field.Invalid(tmplPath.Child("metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}
	allErrs = append(allErrs, corevalidation.ValidatePodTemplateSpec(&spec.Template, tmplPath)...)
	allErrs = append(allErrs, workloadvalidation.ValidateRestartPolicyAlways(&spec.Template, tmplPath)...)
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Forbidden(tmplPath.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in StatefulSet is not Supported"))
	}

	claimsPath := fldPath.Child("volumeClaimTemplates")
	names := sets.New[string]()
	for i := range spec.VolumeClaimTemplates {
		claim := &spec.VolumeClaimTemplates[i]
		if claim.Name != "" && names.Has(claim.Name) {
			allErrs = append(allErrs, field.Duplicate(claimsPath.Index(i).Child("metadata", "name"), claim.Name))
		}
		names.Insert(claim.Name)
		allErrs = append(allErrs, validateVolumeClaimTemplate(claim, claimsPath.Index(i))...)
	}
	return allErrs
}

// validateRollingUpdate mirrors validateRollingUpdateStatefulSet.
func validateRollingUpdate(ru *appsv1.RollingUpdateStatefulSetStrategy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if ru.Partition != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*ru.Partition), fldPath.Child("partition"))...)
	}
	if mu := ru.MaxUnavailable; mu != nil {
		muPath := fldPath.Child("maxUnavailable")
		if mu.Type == intstr.String {
			for _, msg := range validation.IsValidPercent(mu.StrVal) {
				allErrs = append(allErrs, field.Invalid(muPath, mu.String(), msg))
			}
		} else {
			allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(mu.IntValue()), muPath)...)
		}
		value, isPercent := percentValue(*mu)
		if !isPercent {
			value = mu.IntValue()
		}
		if value == 0 {
			allErrs = append(allErrs, field.Invalid(muPath, mu.String(), "cannot be 0"))
		}
		if isPercent && value > 100 {
			allErrs = append(allErrs, field.Invalid(muPath, mu.String(), "must not be greater than 100%"))
		}
	}
	return allErrs
}

// percentValue returns the number of a valid percentage like "25%".
func percentValue(v intstr.IntOrString) (int, bool) {
	if v.Type != intstr.String || len(validation.IsValidPercent(v.StrVal)) != 0 {
		return 0, false
	}
	n, _ := strconv.Atoi(v.StrVal[:len(v.StrVal)-1])
	return n, true
}

// validateRetentionPolicyType mirrors ValidatePersistentVolumeClaimRetentionPolicyType.
func validateRetentionPolicyType(policy appsv1.PersistentVolumeClaimRetentionPolicyType, fldPath *field.Path) field.ErrorList {
	switch policy {
	case appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType:
		return nil
	}
	return field.ErrorList{field.NotSupported(fldPath, policy, []string{
		string(appsv1.RetainPersistentVolumeClaimRetentionPolicyType), string(appsv1.DeletePersistentVolumeClaimRetentionPolicyType)})}
}

var (
	supportedAccessModes = sets.New(corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod)
	supportedVolumeModes = sets.New(corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem)
)

// validateVolumeClaimTemplate checks one volume claim template at fldPath: its name is
// required and a DNS label (it names a pod volume and prefixes the claims'
// names), its labels and annotations are valid, and its spec is a valid claim spec:
// "at least 1 access mode is required", supported access modes, ReadWriteOncePod alone,
// a positive resources.requests[storage] (spec.resources[storage]: Required value), a
// valid selector, storageClassName and volumeMode. Mirrors the spec checks of
// ValidatePersistentVolumeClaimSpec.
func validateVolumeClaimTemplate(claim *corev1.PersistentVolumeClaim, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	metaPath := fldPath.Child("metadata")
	if claim.Name == "" {
		allErrs = append(allErrs, field.Required(metaPath.Child("name"), "name or generateName is required"))
	} else {
		for _, msg := range validation.IsDNS1123Label(claim.Name) {
			allErrs = append(allErrs, field.Invalid(metaPath.Child("name"), claim.Name, msg))
		}
	}
	allErrs = append(allErrs, metav1validation.ValidateLabels(claim.Labels, metaPath.Child("labels"))...)
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(claim.Annotations, metaPath.Child("annotations"))...)

	spec, specPath := &claim.Spec, fldPath.Child("spec")
	if len(spec.AccessModes) == 0 {
		allErrs = append(allErrs, field.Required(specPath.Child("accessModes"), "at least 1 access mode is required"))
	}
	if spec.Selector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, specPath.Child("selector"))...)
	}
	rwop, other := false, false
	for _, mode := range spec.AccessModes {
		switch {
		case !supportedAccessModes.Has(mode):
			allErrs = append(allErrs, field.NotSupported(specPath.Child("accessModes"), mode, sets.List(supportedAccessModes)))
		case mode == corev1.ReadWriteOncePod:
			rwop = true
		default:
			other = true
		}
	}
	if rwop && other {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("accessModes"), "may not use ReadWriteOncePod with other access modes"))
	}
	storagePath := specPath.Child("resources").Key(string(corev1.ResourceStorage))
	if storage, ok := spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		allErrs = append(allErrs, field.Required(storagePath, ""))
	} else if storage.Sign() <= 0 {
		allErrs = append(allErrs, field.Invalid(storagePath, storage.String(), "must be greater than zero"))
	}
	if name := ptr.Deref(spec.StorageClassName, ""); name != "" {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			allErrs = append(allErrs, field.Invalid(specPath.Child("storageClassName"), name, msg))
		}
	}
	if spec.VolumeMode != nil && !supportedVolumeModes.Has(*spec.VolumeMode) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("volumeMode"), *spec.VolumeMode, sets.List(supportedVolumeModes)))
	}
	return allErrs
}

// updatableSpecFields is kube's refusal of any other spec change.
const updatableSpecFields = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"

// ValidateStatefulSetUpdate checks an update: a metadata update (the name is not
// checked again), a valid spec, and no spec change outside replicas, ordinals, template,
// updateStrategy, persistentVolumeClaimRetentionPolicy and minReadySeconds ("spec:
// Forbidden: updates to statefulset spec for fields other than ... are forbidden"; the
// selector, serviceName, podManagementPolicy, volumeClaimTemplates and
// revisionHistoryLimit are fixed at create). Mirrors ValidateStatefulSetUpdate (1.32).
func ValidateStatefulSetUpdate(set, oldSet *appsv1.StatefulSet) field.ErrorList {
	allErrs := objectMetaUpdate(&set.ObjectMeta, &oldSet.ObjectMeta)
	allErrs = append(allErrs, ValidateStatefulSetSpec(&set.Spec, field.NewPath("spec"))...)
	clone := set.Spec.DeepCopy()
	clone.Replicas = oldSet.Spec.Replicas
	clone.Template = oldSet.Spec.Template
	clone.UpdateStrategy = oldSet.Spec.UpdateStrategy
	clone.MinReadySeconds = oldSet.Spec.MinReadySeconds
	clone.Ordinals = oldSet.Spec.Ordinals
	clone.PersistentVolumeClaimRetentionPolicy = oldSet.Spec.PersistentVolumeClaimRetentionPolicy
	if !apiequality.Semantic.DeepEqual(*clone, oldSet.Spec) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec"), updatableSpecFields))
	}
	return allErrs
}

// ValidateStatefulSetStatus checks status counts at fieldPath: every count, the
// observed generation and the collision count >= 0; readyReplicas, currentReplicas,
// updatedReplicas and availableReplicas not above replicas ("cannot be greater than
// status.replicas"), availableReplicas not above readyReplicas. Mirrors
// ValidateStatefulSetStatus.
func ValidateStatefulSetStatus(status *appsv1.StatefulSetStatus, fieldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, c := range []struct {
		name  string
		value int32
	}{{"replicas", status.Replicas}, {"readyReplicas", status.ReadyReplicas}, {"currentReplicas", status.CurrentReplicas},
		{"updatedReplicas", status.UpdatedReplicas}, {"availableReplicas", status.AvailableReplicas}} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(c.value), fieldPath.Child(c.name))...)
	}
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(status.ObservedGeneration, fieldPath.Child("observedGeneration"))...)
	if status.CollisionCount != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*status.CollisionCount), fieldPath.Child("collisionCount"))...)
	}
	const msg = "cannot be greater than status.replicas"
	if status.ReadyReplicas > status.Replicas {
		allErrs = append(allErrs, field.Invalid(fieldPath.Child("readyReplicas"), status.ReadyReplicas, msg))
	}
	if status.CurrentReplicas > status.Replicas {
		allErrs = append(allErrs, field.Invalid(fieldPath.Child("currentReplicas"), status.CurrentReplicas, msg))
	}
	if status.UpdatedReplicas > status.Replicas {
		allErrs = append(allErrs, field.Invalid(fieldPath.Child("updatedReplicas"), status.UpdatedReplicas, msg))
	}
	if status.AvailableReplicas > status.Replicas {
		allErrs = append(allErrs, field.Invalid(fieldPath.Child("availableReplicas"), status.AvailableReplicas, msg))
	}
	if status.AvailableReplicas > status.ReadyReplicas {
		allErrs = append(allErrs, field.Invalid(fieldPath.Child("availableReplicas"), status.AvailableReplicas, "cannot be greater than status.readyReplicas"))
	}
	return allErrs
}

// ValidateStatefulSetStatusUpdate checks a statefulsets/status write: a valid status, a
// metadata update, and a collision count that does not go down ("status.collisionCount:
// Invalid value: ...: cannot be decremented"). Mirrors ValidateStatefulSetStatusUpdate.
func ValidateStatefulSetStatusUpdate(set, oldSet *appsv1.StatefulSet) field.ErrorList {
	allErrs := ValidateStatefulSetStatus(&set.Status, field.NewPath("status"))
	allErrs = append(allErrs, objectMetaUpdate(&set.ObjectMeta, &oldSet.ObjectMeta)...)
	newCount, oldCount := set.Status.CollisionCount, oldSet.Status.CollisionCount
	if (newCount == nil && oldCount != nil) || (newCount != nil && oldCount != nil && *newCount < *oldCount) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("status", "collisionCount"), ptr.Deref(newCount, 0), "cannot be decremented"))
	}
	return allErrs
}
