// Package poddisruptionbudget is the policy/v1 poddisruptionbudgets resource: its
// strategy (status cleared on create, generation bumped on spec changes, kube's
// validation, kubectl's columns) and poddisruptionbudgets/status, which the disruption
// controller and the pods/eviction subresource write. Mirrors
// k8s.io/kubernetes/pkg/registry/policy/poddisruptionbudget and
// ValidatePodDisruptionBudget in pkg/apis/policy/validation.
package poddisruptionbudget

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
)

// Strategy is the poddisruptionbudgets strategy. Mirrors podDisruptionBudgetStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of poddisruptionbudgets/status: only status changes.
// Mirrors podDisruptionBudgetStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.ResetFieldsStrategy         = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// SupportedUnhealthyPodEvictionPolicies are the values spec.unhealthyPodEvictionPolicy
// may take. Mirrors supportedUnhealthyPodEvictionPolicies.
var SupportedUnhealthyPodEvictionPolicies = []string{string(policyv1.AlwaysAllow), string(policyv1.IfHealthyBudget)}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate clears status (a client cannot set it) and sets generation 1.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{}
	pdb.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec
// changes, so status.observedGeneration tells whether the controller has seen it.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newPDB, oldPDB := obj.(*policyv1.PodDisruptionBudget), old.(*policyv1.PodDisruptionBudget)
	newPDB.Status = oldPDB.Status
	if !apiequality.Semantic.DeepEqual(newPDB.Spec, oldPDB.Spec) {
		newPDB.Generation = oldPDB.Generation + 1
	}
}

// Validate checks a new PodDisruptionBudget: its metadata (any name valid as a path
// segment, as kube's generic create validation requires) and its spec.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	allErrs := apivalidation.ValidateObjectMeta(&pdb.ObjectMeta, true, path.ValidatePathSegmentName, field.NewPath("metadata"))
	return append(allErrs, ValidatePodDisruptionBudgetSpec(&pdb.Spec, false, field.NewPath("spec"))...)
}

// ValidateUpdate checks an update: the metadata update rules and a valid spec (the spec
// is mutable in policy/v1). A selector whose label values were already invalid when
// stored is still accepted, as kube's hasInvalidLabelValueInLabelSelector allows.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newPDB, oldPDB := obj.(*policyv1.PodDisruptionBudget), old.(*policyv1.PodDisruptionBudget)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newPDB.ObjectMeta, &oldPDB.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidatePodDisruptionBudgetSpec(&newPDB.Spec, hasInvalidLabelValueInSelector(oldPDB.Spec.Selector), field.NewPath("spec"))...)
}

// AllowUnconditionalUpdate is false, as kube's: an update must name the resourceVersion
// it replaces (422 otherwise), so two writers of status.disruptionsAllowed never lose
// each other's change.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"policy/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pdb, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok {
		return nil, nil, fmt.Errorf("not a PodDisruptionBudget: %T", obj)
	}
	return labels.Set(pdb.Labels), registry.ObjectMetaFieldsSet(&pdb.ObjectMeta, true), nil
}

// TableColumns are NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE. Mirrors
// podDisruptionBudgetColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
		{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
		{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
		registry.AgeColumn,
	}
}

// TableRow prints one PodDisruptionBudget: "N/A" for whichever of minAvailable and
// maxUnavailable is unset. Mirrors printPodDisruptionBudget.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	minAvailable, maxUnavailable := "N/A", "N/A"
	if pdb.Spec.MinAvailable != nil {
		minAvailable = pdb.Spec.MinAvailable.String()
	}
	if pdb.Spec.MaxUnavailable != nil {
		maxUnavailable = pdb.Spec.MaxUnavailable.String()
	}
	return []interface{}{pdb.Name, minAvailable, maxUnavailable, int64(pdb.Status.DisruptionsAllowed),
		registry.TranslateTimestampSince(pdb.CreationTimestamp)}
}

// ValidatePodDisruptionBudgetSpec checks a spec at fldPath: minAvailable and
// maxUnavailable not both set, each a non-negative integer or a percentage of at most
// 100%, a well-formed selector (label values checked unless allowInvalidLabelValues),
// and unhealthyPodEvictionPolicy one of IfHealthyBudget and AlwaysAllow. Errors are
// kube's, e.g. "spec: Invalid value: ...: minAvailable and maxUnavailable cannot be both
// set", "spec.minAvailable: Invalid value: \"120%\": must not be greater than 100%".
// Mirrors ValidatePodDisruptionBudgetSpec.
func ValidatePodDisruptionBudgetSpec(spec *policyv1.PodDisruptionBudgetSpec, allowInvalidLabelValues bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.MinAvailable != nil && spec.MaxUnavailable != nil {
		allErrs = append(allErrs, field.Invalid(fldPath, *spec, "minAvailable and maxUnavailable cannot be both set"))
	}
	if spec.MinAvailable != nil {
		allErrs = append(allErrs, validatePositiveIntOrPercent(*spec.MinAvailable, fldPath.Child("minAvailable"))...)
		allErrs = append(allErrs, isNotMoreThan100Percent(*spec.MinAvailable, fldPath.Child("minAvailable"))...)
	}
	if spec.MaxUnavailable != nil {
		allErrs = append(allErrs, validatePositiveIntOrPercent(*spec.MaxUnavailable, fldPath.Child("maxUnavailable"))...)
		allErrs = append(allErrs, isNotMoreThan100Percent(*spec.MaxUnavailable, fldPath.Child("maxUnavailable"))...)
	}
	allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.Selector,
		metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: allowInvalidLabelValues}, fldPath.Child("selector"))...)
	if p := spec.UnhealthyPodEvictionPolicy; p != nil {
		supported := false
		for _, s := range SupportedUnhealthyPodEvictionPolicies {
			supported = supported || s == string(*p)
		}
		if !supported {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("unhealthyPodEvictionPolicy"), *p, SupportedUnhealthyPodEvictionPolicies))
		}
	}
	return allErrs
}

// validatePositiveIntOrPercent accepts a non-negative integer or a percentage such as
// "25%". Mirrors apps validation's ValidatePositiveIntOrPercent.
func validatePositiveIntOrPercent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch v.Type {
	case intstr.String:
		for _, msg := range utilvalidation.IsValidPercent(v.StrVal) {
			allErrs = append(allErrs, field.Invalid(fldPath, v, msg))
		}
	case intstr.Int:
		allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(v.IntValue()), fldPath)...)
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, v, "must be an integer or percentage (e.g '5%')"))
	}
	return allErrs
}

// isNotMoreThan100Percent refuses a percentage above 100%. Mirrors IsNotMoreThan100Percent.
func isNotMoreThan100Percent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if v.Type != intstr.String || len(utilvalidation.IsValidPercent(v.StrVal)) != 0 {
		return nil
	}
	if n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%")); err != nil || n <= 100 {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, v, "must not be greater than 100%")}
}

// hasInvalidLabelValueInSelector reports whether a stored selector fails today's
// validation, in which case an update may keep invalid values in its matchExpressions.
// Mirrors hasInvalidLabelValueInLabelSelector.
func hasInvalidLabelValueInSelector(selector *metav1.LabelSelector) bool {
	if selector == nil {
		return false
	}
	return len(metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, nil)) > 0
}

// GetResetFields: poddisruptionbudgets/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"policy/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec: status updates may not change it.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*policyv1.PodDisruptionBudget).Spec = old.(*policyv1.PodDisruptionBudget).Spec
}

// ValidateUpdate checks the new status: well-formed conditions and no negative count.
// Mirrors ValidatePodDisruptionBudgetStatusUpdate for policy/v1.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newPDB, oldPDB := obj.(*policyv1.PodDisruptionBudget), old.(*policyv1.PodDisruptionBudget)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newPDB.ObjectMeta, &oldPDB.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateStatus(&newPDB.Status, field.NewPath("status"))...)
}

// ValidateStatus checks a status at fldPath: conditions as metav1 requires them and
// disruptionsAllowed, currentHealthy, desiredHealthy and expectedPods non-negative.
// Mirrors ValidatePodDisruptionBudgetStatusUpdate (policy/v1).
func ValidateStatus(status *policyv1.PodDisruptionBudgetStatus, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(status.DisruptionsAllowed), fldPath.Child("disruptionsAllowed"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(status.CurrentHealthy), fldPath.Child("currentHealthy"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(status.DesiredHealthy), fldPath.Child("desiredHealthy"))...)
	return append(allErrs, apivalidation.ValidateNonnegativeField(int64(status.ExpectedPods), fldPath.Child("expectedPods"))...)
}
