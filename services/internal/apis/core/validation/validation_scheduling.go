package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateTolerations checks tolerations at fldPath: a key is a label name; an empty key
// goes with operator Exists (match everything); tolerationSeconds only with effect
// NoExecute; operator Equal (or empty) with a label value, Exists with no value; effect
// empty (all) or NoSchedule, PreferNoSchedule, NoExecute. Mirrors ValidateTolerations in
// k8s.io/kubernetes/pkg/apis/core/validation.
func ValidateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tolerations {
		idxPath := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idxPath.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("effect"), t.Effect,
				"effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if errs := validation.IsValidLabelValue(t.Value); len(errs) != 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Value, strings.Join(errs, ";")))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("operator"), t.Operator,
				[]corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("effect"), t.Effect,
				[]corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
		}
	}
	return allErrs
}

// ValidateOverhead checks a pod overhead (a pod's spec.overhead, a RuntimeClass's
// overhead.podFixed) at fldPath as container limits are checked: each name a standard
// container resource (cpu, memory, ephemeral-storage, hugepages-<size>) or a
// domain-qualified extended resource, each quantity non-negative (and whole for an
// extended resource), and hugepages only next to cpu or memory. Mirrors validateOverhead
// (ValidateContainerResourceRequirements over limits) in
// k8s.io/kubernetes/pkg/apis/core/validation.
func ValidateOverhead(overhead corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	limPath := fldPath.Child("limits")
	cpuOrMemory, hugePages := false, false
	for name, q := range overhead {
		path := limPath.Key(string(name))
		allErrs = append(allErrs, ValidateContainerResourceName(name, path)...)
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(path, q.String(), "must be greater than or equal to 0"))
		}
		if IsExtendedResourceName(name) && q.MilliValue()%1000 != 0 {
			allErrs = append(allErrs, field.Invalid(path, q, "must be an integer"))
		}
		switch {
		case strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
			hugePages = true
		case name == corev1.ResourceCPU || name == corev1.ResourceMemory:
			cpuOrMemory = true
		}
	}
	if hugePages && !cpuOrMemory {
		allErrs = append(allErrs, field.Forbidden(fldPath, "HugePages require cpu or memory"))
	}
	return allErrs
}

// standardContainerResources are the unprefixed resources a container may ask for.
var standardContainerResources = sets.New(corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage)

// ValidateContainerResourceName mirrors kube's ValidateContainerResourceName: a
// qualified name; unprefixed, a standard container resource; prefixed outside
// kubernetes.io, an extended resource.
func ValidateContainerResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(name)) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	if len(allErrs) != 0 {
		return allErrs
	}
	if !strings.Contains(string(name), "/") {
		if !standardContainerResources.Has(name) && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			return append(allErrs, field.Invalid(fldPath, name, "must be a standard resource for containers"))
		}
	} else if !IsNativeResource(name) && !IsExtendedResourceName(name) {
		return append(allErrs, field.Invalid(fldPath, name, "doesn't follow extended resource name standard"))
	}
	return allErrs
}

// IsNativeResource reports whether name is in kubernetes.io's namespace (unprefixed
// names are). Mirrors helper.IsNativeResource.
func IsNativeResource(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix)
}

// IsExtendedResourceName reports whether name is an extended resource: outside
// kubernetes.io, not "requests."-prefixed, and a qualified name once so prefixed.
// Mirrors helper.IsExtendedResourceName.
func IsExtendedResourceName(name corev1.ResourceName) bool {
	if IsNativeResource(name) || strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(fmt.Sprintf("%s%s", corev1.DefaultResourceRequestsPrefix, name))) == 0
}
