// Package validation checks what the workload resources (Deployments, ReplicaSets, Jobs,
// DaemonSets, and for counts and restart policy ReplicationControllers) share: a label
// selector that selects the pod template it carries, counts, and rolling update bounds. Mirrors the selector and template checks of
// k8s.io/kubernetes/pkg/apis/apps/validation.
package validation

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// ValidateSelectorAndTemplate checks spec.selector (required, non-empty, well formed)
// and spec.template (a valid pod template whose labels the selector matches), under
// specPath. Errors are kube's: "spec.selector: Required value", "spec.selector: Invalid
// value: ...: empty selector is invalid for deployment", and "spec.template.metadata.labels:
// Invalid value: ...: `selector` does not match template `labels`".
func ValidateSelectorAndTemplate(selector *metav1.LabelSelector, template *corev1.PodTemplateSpec, specPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	selPath := specPath.Child("selector")
	if selector == nil {
		allErrs = append(allErrs, field.Required(selPath, ""))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, selPath)...)
		if len(selector.MatchLabels)+len(selector.MatchExpressions) == 0 {
			allErrs = append(allErrs, field.Invalid(selPath, selector, "empty selector is invalid for deployment"))
		}
	}
	tmplPath := specPath.Child("template")
	if selector != nil && len(allErrs) == 0 {
		sel, err := metav1.LabelSelectorAsSelector(selector)
		if err == nil && !sel.Matches(labels.Set(template.Labels)) {
			allErrs = append(allErrs, field.Invalid(tmplPath.Child("metadata", "labels"), template.Labels, "`selector` does not match template `labels`"))
		}
	}
	return append(allErrs, corevalidation.ValidatePodTemplateSpec(template, tmplPath)...)
}

// ValidateRestartPolicyAlways checks that a long-running workload's pods restart: a
// Deployment's or ReplicaSet's template must say restartPolicy Always.
func ValidateRestartPolicyAlways(template *corev1.PodTemplateSpec, tmplPath *field.Path) field.ErrorList {
	if template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		return field.ErrorList{field.NotSupported(tmplPath.Child("spec", "restartPolicy"), template.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)})}
	}
	return nil
}

// ValidateSelectorUnchanged forbids changing spec.selector after create, as apps/v1 does.
func ValidateSelectorUnchanged(newSel, oldSel *metav1.LabelSelector, specPath *field.Path) field.ErrorList {
	if !apiequality.Semantic.DeepEqual(newSel, oldSel) {
		return field.ErrorList{field.Invalid(specPath.Child("selector"), newSel, "field is immutable")}
	}
	return nil
}

// ValidateNonnegative checks a count field (replicas, minReadySeconds, ...).
func ValidateNonnegative(value int64, fldPath *field.Path) field.ErrorList {
	if value < 0 {
		return field.ErrorList{field.Invalid(fldPath, value, "must be greater than or equal to 0")}
	}
	return nil
}

// ValidatePositiveIntOrPercent checks a rolling update bound (maxUnavailable, maxSurge):
// a non-negative integer, or a percentage such as "25%" (kube's IsValidPercent message
// otherwise). Mirrors ValidatePositiveIntOrPercent.
func ValidatePositiveIntOrPercent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch v.Type {
	case intstr.String:
		for _, msg := range utilvalidation.IsValidPercent(v.StrVal) {
			allErrs = append(allErrs, field.Invalid(fldPath, v, msg))
		}
	case intstr.Int:
		allErrs = append(allErrs, ValidateNonnegative(int64(v.IntValue()), fldPath)...)
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, v, "must be an integer or percentage (e.g '5%')"))
	}
	return allErrs
}

// IsNotMoreThan100Percent refuses a percentage above 100% ("must not be greater than
// 100%"); integers and malformed strings pass (ValidatePositiveIntOrPercent reports the
// latter). Mirrors IsNotMoreThan100Percent.
func IsNotMoreThan100Percent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	value, isPercent := percentValue(v)
	if !isPercent || value <= 100 {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, v, "must not be greater than 100%")}
}

// IntOrPercentValue is v's number: the integer, or the percentage without its "%" (0
// for a malformed string). Mirrors getIntOrPercentValue.
func IntOrPercentValue(v intstr.IntOrString) int {
	if value, isPercent := percentValue(v); isPercent {
		return value
	}
	return v.IntValue()
}

// percentValue parses a well-formed percentage; false for integers and malformed strings.
func percentValue(v intstr.IntOrString) (int, bool) {
	if v.Type != intstr.String || len(utilvalidation.IsValidPercent(v.StrVal)) != 0 {
		return 0, false
	}
	value, _ := strconv.Atoi(v.StrVal[:len(v.StrVal)-1])
	return value, true
}
