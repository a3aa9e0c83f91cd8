// Package horizontalpodautoscaler is the autoscaling horizontalpodautoscalers resource,
// stored as autoscaling/v2 and served in autoscaling/v2 and autoscaling/v1 (a View of
// the same objects, converted by the apiserver's scheme): its strategy (status cleared
// on create and kept on update, kube's autoscaling/v2 defaults, kube's validation,
// kubectl's columns) and horizontalpodautoscalers/status, which the
// horizontal-pod-autoscaler controller writes. Mirrors
// k8s.io/kubernetes/pkg/registry/autoscaling/horizontalpodautoscaler,
// pkg/apis/autoscaling/v2/defaults.go and pkg/apis/autoscaling/validation.
package horizontalpodautoscaler

import (
	"context"
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

const (
	// MaxPeriodSeconds is the longest period a scaling policy may have.
	MaxPeriodSeconds int32 = 1800
	// MaxStabilizationWindowSeconds is the longest stabilization window.
	MaxStabilizationWindowSeconds int32 = 3600
	// DefaultCPUUtilization is the CPU utilization target, in percent, of an
	// autoscaler that names no metric.
	DefaultCPUUtilization int32 = 80
)

// Strategy is the horizontalpodautoscalers strategy, on autoscaling/v2 objects (both
// served versions write through it). Mirrors autoscalerStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of horizontalpodautoscalers/status: only status
// changes. Mirrors autoscalerStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// DefaultScaleUpRules are the scale-up rules of a behavior that sets none: no
// stabilization, at most 4 pods or 100 % more every 15 s, whichever is more. Mirrors
// defaultHPAScaleUpRules.
func DefaultScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To[int32](0),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// DefaultScaleDownRules are the scale-down rules of a behavior that sets none: the
// stabilization window left unset (the controller's
// --horizontal-pod-autoscaler-downscale-stabilization, 5 min, applies), at most 100 %
// fewer every 15 s. Mirrors defaultHPAScaleDownRules.
func DefaultScaleDownRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies:     []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
}

// fillRules returns defaults with what rules sets (selectPolicy,
// stabilizationWindowSeconds, policies) in place of the defaults'. Mirrors
// copyHPAScalingRules.
func fillRules(rules, defaults *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if rules == nil {
		return defaults
	}
	if rules.SelectPolicy != nil {
		defaults.SelectPolicy = rules.SelectPolicy
	}
	if rules.StabilizationWindowSeconds != nil {
		defaults.StabilizationWindowSeconds = rules.StabilizationWindowSeconds
	}
	if rules.Policies != nil {
		defaults.Policies = rules.Policies
	}
	defaults.Tolerance = rules.Tolerance
	return defaults
}

// SetDefaults fills what autoscaling/v2 defaults: minReplicas 1; with no metric, a cpu
// Utilization metric targeting DefaultCPUUtilization; and, when a behavior is set, each
// of its rules completed from DefaultScaleUpRules and DefaultScaleDownRules (a nil
// behavior stays nil: the controller then uses those defaults). Mirrors
// SetDefaults_HorizontalPodAutoscaler (autoscaling/v2).
func SetDefaults(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	if hpa.Spec.MinReplicas == nil {
		hpa.Spec.MinReplicas = ptr.To[int32](1)
	}
	if len(hpa.Spec.Metrics) == 0 {
		hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(DefaultCPUUtilization)}}}}
	}
	if b := hpa.Spec.Behavior; b != nil {
		b.ScaleUp = fillRules(b.ScaleUp, DefaultScaleUpRules())
		b.ScaleDown = fillRules(b.ScaleDown, DefaultScaleDownRules())
	}
}

// dropDisabledFields clears the scaling rules' tolerance, which kube 1.32 does not have
// (the HPAConfigurableTolerance gate, off), unless old already uses it. Mirrors
// dropDisabledFields.
func dropDisabledFields(hpa, old *autoscalingv2.HorizontalPodAutoscaler) {
	if old != nil && usesTolerance(old) {
		return
	}
	if b := hpa.Spec.Behavior; b != nil {
		for _, r := range []*autoscalingv2.HPAScalingRules{b.ScaleUp, b.ScaleDown} {
			if r != nil {
				r.Tolerance = nil
			}
		}
	}
}

func usesTolerance(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
	b := hpa.Spec.Behavior
	return b != nil && ((b.ScaleUp != nil && b.ScaleUp.Tolerance != nil) || (b.ScaleDown != nil && b.ScaleDown.Tolerance != nil))
}

// PrepareForCreate clears status (a client cannot set it) and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	hpa := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{}
	dropDisabledFields(hpa, nil)
	SetDefaults(hpa)
}

// PrepareForUpdate keeps the stored status and fills defaults.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	hpa, oldHPA := obj.(*autoscalingv2.HorizontalPodAutoscaler), old.(*autoscalingv2.HorizontalPodAutoscaler)
	hpa.Status = oldHPA.Status
	dropDisabledFields(hpa, oldHPA)
	SetDefaults(hpa)
}

// Validate checks a new autoscaler: its metadata (a DNS subdomain name) and its spec,
// with minReplicas at least 1 (HPAScaleToZero is off). Mirrors
// ValidateHorizontalPodAutoscaler.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	hpa := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	allErrs := apivalidation.ValidateObjectMeta(&hpa.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, ValidateSpec(&hpa.Spec, field.NewPath("spec"), 1)...)
}

// ValidateUpdate checks an update: the metadata update rules and the spec, where
// minReplicas 0 stays allowed only for an autoscaler that already has it. Mirrors
// ValidateHorizontalPodAutoscalerUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	hpa, oldHPA := obj.(*autoscalingv2.HorizontalPodAutoscaler), old.(*autoscalingv2.HorizontalPodAutoscaler)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&hpa.ObjectMeta, &oldHPA.ObjectMeta, field.NewPath("metadata"))
	lowerBound := int32(1)
	if oldHPA.Spec.MinReplicas != nil && *oldHPA.Spec.MinReplicas == 0 {
		lowerBound = 0
	}
	return append(allErrs, ValidateSpec(&hpa.Spec, field.NewPath("spec"), lowerBound)...)
}

// GetResetFields: the main resource keeps the stored status, in both versions.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"autoscaling/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
		"autoscaling/v2": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return nil, nil, fmt.Errorf("not a HorizontalPodAutoscaler: %T", obj)
	}
	return labels.Set(hpa.Labels), registry.ObjectMetaFieldsSet(&hpa.ObjectMeta, true), nil
}

// TableColumns are NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE. Mirrors
// horizontalPodAutoscalerColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Reference", Type: "string", Description: "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource."},
		{Name: "Targets", Type: "string", Description: "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used)."},
		{Name: "MinPods", Type: "string", Description: "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down."},
		{Name: "MaxPods", Type: "string", Description: "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up."},
		{Name: "Replicas", Type: "string", Description: "currentReplicas is current number of replicas of pods managed by this autoscaler."},
		registry.AgeColumn,
	}
}

// TableRow prints one autoscaler: its target as Kind/name, each metric as
// current/target (at most two, then "+ N more..."), minReplicas ("<unset>" when nil),
// maxReplicas and status.currentReplicas. Mirrors printHorizontalPodAutoscaler.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	hpa := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	minPods := "<unset>"
	if hpa.Spec.MinReplicas != nil {
		minPods = fmt.Sprintf("%d", *hpa.Spec.MinReplicas)
	}
	return []interface{}{hpa.Name, hpa.Spec.ScaleTargetRef.Kind + "/" + hpa.Spec.ScaleTargetRef.Name,
		FormatMetrics(hpa.Spec.Metrics, hpa.Status.CurrentMetrics), minPods, int64(hpa.Spec.MaxReplicas),
		int64(hpa.Status.CurrentReplicas), registry.TranslateTimestampSince(hpa.CreationTimestamp)}
}

// FormatMetrics is the TARGETS cell: each metric as "current/target" ("cpu: 12%/80%",
// "<unknown>" for a current value not yet known, "(avg)" after an average-value
// target of an Object or External metric), the status of the metric at the same index
// giving the current value; "<none>" without metrics. Mirrors formatHPAMetrics.
func FormatMetrics(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	const max = 2
	var list []string
	for i, spec := range specs {
		var st *autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = &statuses[i]
		}
		list = append(list, formatMetric(&spec, st))
	}
	if len(list) > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ", "), len(list)-max)
	}
	return strings.Join(list, ", ")
}

func formatMetric(spec *autoscalingv2.MetricSpec, st *autoscalingv2.MetricStatus) string {
	const unknown = "<unknown>"
	current := unknown
	switch spec.Type {
	case autoscalingv2.ExternalMetricSourceType:
		if spec.External == nil {
			break
		}
		if spec.External.Target.AverageValue != nil {
			if st != nil && st.External != nil && st.External.Current.AverageValue != nil {
				current = st.External.Current.AverageValue.String()
			}
			return fmt.Sprintf("%s/%s (avg)", current, spec.External.Target.AverageValue.String())
		}
		if st != nil && st.External != nil && st.External.Current.Value != nil {
			current = st.External.Current.Value.String()
		}
		return fmt.Sprintf("%s/%s", current, quantityString(spec.External.Target.Value))
	case autoscalingv2.PodsMetricSourceType:
		if spec.Pods == nil {
			break
		}
		if st != nil && st.Pods != nil && st.Pods.Current.AverageValue != nil {
			current = st.Pods.Current.AverageValue.String()
		}
		return fmt.Sprintf("%s/%s", current, quantityString(spec.Pods.Target.AverageValue))
	case autoscalingv2.ObjectMetricSourceType:
		if spec.Object == nil {
			break
		}
		if spec.Object.Target.AverageValue != nil {
			if st != nil && st.Object != nil && st.Object.Current.AverageValue != nil {
				current = st.Object.Current.AverageValue.String()
			}
			return fmt.Sprintf("%s/%s (avg)", current, spec.Object.Target.AverageValue.String())
		}
		if st != nil && st.Object != nil && st.Object.Current.Value != nil {
			current = st.Object.Current.Value.String()
		}
		return fmt.Sprintf("%s/%s", current, quantityString(spec.Object.Target.Value))
	case autoscalingv2.ResourceMetricSourceType:
		if spec.Resource == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.Resource != nil {
			cur = &st.Resource.Current
		}
		return string(spec.Resource.Name) + ": " + formatResourceTarget(spec.Resource.Target, cur)
	case autoscalingv2.ContainerResourceMetricSourceType:
		if spec.ContainerResource == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.ContainerResource != nil {
			cur = &st.ContainerResource.Current
		}
		return string(spec.ContainerResource.Name) + ": " + formatResourceTarget(spec.ContainerResource.Target, cur)
	}
	return "<unknown type>"
}

// formatResourceTarget is "current/target" of a (container) resource metric: raw
// values for an averageValue target, percentages ("<auto>" for no target) otherwise.
func formatResourceTarget(target autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if target.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return current + "/" + target.AverageValue.String()
	}
	if cur != nil && cur.AverageUtilization != nil {
		current = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	want := "<auto>"
	if target.AverageUtilization != nil {
		want = fmt.Sprintf("%d%%", *target.AverageUtilization)
	}
	return current + "/" + want
}

func quantityString(q interface{ String() string }) string {
	if q == nil {
		return "<nil>"
	}
	return q.String()
}

// GetResetFields: horizontalpodautoscalers/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"autoscaling/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
		"autoscaling/v2": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// PrepareForUpdate keeps the stored spec: status updates may not change it.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*autoscalingv2.HorizontalPodAutoscaler).Spec = old.(*autoscalingv2.HorizontalPodAutoscaler).Spec
}

// ValidateUpdate checks a status update: the metadata update rules and non-negative
// currentReplicas and desiredReplicas. Mirrors ValidateHorizontalPodAutoscalerStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	hpa, oldHPA := obj.(*autoscalingv2.HorizontalPodAutoscaler), old.(*autoscalingv2.HorizontalPodAutoscaler)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&hpa.ObjectMeta, &oldHPA.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(hpa.Status.CurrentReplicas), field.NewPath("status", "currentReplicas"))...)
	return append(allErrs, apivalidation.ValidateNonnegativeField(int64(hpa.Status.DesiredReplicas), field.NewPath("status", "desiredReplicas"))...)
}

// ValidateSpec checks a spec at fldPath: minReplicas at least minReplicasLowerBound,
// maxReplicas at least 1 and at least minReplicas, the target reference, the metrics
// and the behavior, with kube's messages ("must be greater than or equal to 1", "must
// be greater than or equal to `minReplicas`", ...). Mirrors
// validateHorizontalPodAutoscalerSpec.
func ValidateSpec(spec *autoscalingv2.HorizontalPodAutoscalerSpec, fldPath *field.Path, minReplicasLowerBound int32) field.ErrorList {
	var allErrs field.ErrorList
	if spec.MinReplicas != nil && *spec.MinReplicas < minReplicasLowerBound {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("minReplicas"), *spec.MinReplicas,
			fmt.Sprintf("must be greater than or equal to %d", minReplicasLowerBound)))
	}
	if spec.MaxReplicas < 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxReplicas"), spec.MaxReplicas, "must be greater than 0"))
	}
	if spec.MinReplicas != nil && spec.MaxReplicas < *spec.MinReplicas {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxReplicas"), spec.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	allErrs = append(allErrs, ValidateCrossVersionObjectReference(spec.ScaleTargetRef, fldPath.Child("scaleTargetRef"))...)
	allErrs = append(allErrs, validateMetrics(spec.Metrics, fldPath.Child("metrics"), spec.MinReplicas)...)
	return append(allErrs, validateBehavior(spec.Behavior, fldPath.Child("behavior"))...)
}

// ValidateCrossVersionObjectReference requires kind and name, each valid as a path
// segment. Mirrors ValidateCrossVersionObjectReference.
func ValidateCrossVersionObjectReference(ref autoscalingv2.CrossVersionObjectReference, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if ref.Kind == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), ""))
	} else {
		for _, msg := range path.IsValidPathSegmentName(ref.Kind) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("kind"), ref.Kind, msg))
		}
	}
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	} else {
		for _, msg := range path.IsValidPathSegmentName(ref.Name) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), ref.Name, msg))
		}
	}
	return allErrs
}

func validateMetrics(metrics []autoscalingv2.MetricSpec, fldPath *field.Path, minReplicas *int32) field.ErrorList {
	var allErrs field.ErrorList
	objectOrExternal := false
	for i := range metrics {
		allErrs = append(allErrs, validateMetricSpec(&metrics[i], fldPath.Index(i))...)
		objectOrExternal = objectOrExternal || metrics[i].Type == autoscalingv2.ObjectMetricSourceType ||
			metrics[i].Type == autoscalingv2.ExternalMetricSourceType
	}
	if minReplicas != nil && *minReplicas == 0 && !objectOrExternal {
		allErrs = append(allErrs, field.Forbidden(fldPath, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return allErrs
}

func validateBehavior(behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, fldPath *field.Path) field.ErrorList {
	if behavior == nil {
		return nil
	}
	allErrs := validateScalingRules(behavior.ScaleUp, fldPath.Child("scaleUp"))
	return append(allErrs, validateScalingRules(behavior.ScaleDown, fldPath.Child("scaleDown"))...)
}

var validSelectPolicies = []string{string(autoscalingv2.DisabledPolicySelect), string(autoscalingv2.MaxChangePolicySelect), string(autoscalingv2.MinChangePolicySelect)}

func validateScalingRules(rules *autoscalingv2.HPAScalingRules, fldPath *field.Path) field.ErrorList {
	if rules == nil {
		return nil
	}
	var allErrs field.ErrorList
	if w := rules.StabilizationWindowSeconds; w != nil && *w < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("stabilizationWindowSeconds"), w, "must be greater than or equal to zero"))
	}
	if w := rules.StabilizationWindowSeconds; w != nil && *w > MaxStabilizationWindowSeconds {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("stabilizationWindowSeconds"), w,
			fmt.Sprintf("must be less than or equal to %v", MaxStabilizationWindowSeconds)))
	}
	if p := rules.SelectPolicy; p != nil && !sets.New(validSelectPolicies...).Has(string(*p)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("selectPolicy"), p, validSelectPolicies))
	}
	policies := fldPath.Child("policies")
	if len(rules.Policies) == 0 {
		allErrs = append(allErrs, field.Required(policies, "must specify at least one Policy"))
	}
	for i, p := range rules.Policies {
		idx := policies.Index(i)
		if p.Type != autoscalingv2.PodsScalingPolicy && p.Type != autoscalingv2.PercentScalingPolicy {
			allErrs = append(allErrs, field.NotSupported(idx.Child("type"), p.Type, []string{string(autoscalingv2.PercentScalingPolicy), string(autoscalingv2.PodsScalingPolicy)}))
		}
		if p.Value <= 0 {
			allErrs = append(allErrs, field.Invalid(idx.Child("value"), p.Value, "must be greater than zero"))
		}
		if p.PeriodSeconds <= 0 {
			allErrs = append(allErrs, field.Invalid(idx.Child("periodSeconds"), p.PeriodSeconds, "must be greater than zero"))
		}
		if p.PeriodSeconds > MaxPeriodSeconds {
			allErrs = append(allErrs, field.Invalid(idx.Child("periodSeconds"), p.PeriodSeconds,
				fmt.Sprintf("must be less than or equal to %v", MaxPeriodSeconds)))
		}
	}
	return allErrs
}

var validMetricSourceTypes = []string{
	string(autoscalingv2.ContainerResourceMetricSourceType), string(autoscalingv2.ExternalMetricSourceType),
	string(autoscalingv2.ObjectMetricSourceType), string(autoscalingv2.PodsMetricSourceType),
	string(autoscalingv2.ResourceMetricSourceType),
}

// validateMetricSpec checks one metric: a known type, its source (and only its
// source) set and valid. Mirrors validateMetricSpec.
func validateMetricSpec(spec *autoscalingv2.MetricSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Type == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("type"), "must specify a metric source type"))
	}
	if !sets.New(validMetricSourceTypes...).Has(string(spec.Type)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), spec.Type, validMetricSourceTypes))
	}
	// The first source set (in kube's order) is validated; more than one is refused below.
	present := sets.New[string]()
	if spec.Object != nil {
		present.Insert("object")
		if present.Len() == 1 {
			allErrs = append(allErrs, validateObjectSource(spec.Object, fldPath.Child("object"))...)
		}
	}
	if spec.External != nil {
		present.Insert("external")
		if present.Len() == 1 {
			allErrs = append(allErrs, validateExternalSource(spec.External, fldPath.Child("external"))...)
		}
	}
	if spec.Pods != nil {
		present.Insert("pods")
		if present.Len() == 1 {
			allErrs = append(allErrs, validatePodsSource(spec.Pods, fldPath.Child("pods"))...)
		}
	}
	if spec.Resource != nil {
		present.Insert("resource")
		if present.Len() == 1 {
			allErrs = append(allErrs, validateResourceSource(spec.Resource, fldPath.Child("resource"))...)
		}
	}
	if spec.ContainerResource != nil {
		present.Insert("containerResource")
		if present.Len() == 1 {
			allErrs = append(allErrs, validateContainerResourceSource(spec.ContainerResource, fldPath.Child("containerResource"))...)
		}
	}
	var expected string
	var missing bool
	switch spec.Type {
	case autoscalingv2.ObjectMetricSourceType:
		expected, missing = "object", spec.Object == nil
	case autoscalingv2.PodsMetricSourceType:
		expected, missing = "pods", spec.Pods == nil
	case autoscalingv2.ResourceMetricSourceType:
		expected, missing = "resource", spec.Resource == nil
	case autoscalingv2.ExternalMetricSourceType:
		expected, missing = "external", spec.External == nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		expected, missing = "containerResource", spec.ContainerResource == nil
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), spec.Type, validMetricSourceTypes))
	}
	if missing {
		allErrs = append(allErrs, field.Required(fldPath.Child(expected), "must populate information for the given metric source"))
	}
	if present.Len() != 1 {
		present.Delete(expected)
		for _, typ := range sets.List(present) {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(typ), "must populate the given metric source only"))
		}
	}
	return allErrs
}

func validateObjectSource(src *autoscalingv2.ObjectMetricSource, fldPath *field.Path) field.ErrorList {
	allErrs := ValidateCrossVersionObjectReference(src.DescribedObject, fldPath.Child("describedObject"))
	allErrs = append(allErrs, validateMetricIdentifier(src.Metric, fldPath.Child("metric"))...)
	allErrs = append(allErrs, validateMetricTarget(src.Target, fldPath.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return allErrs
}

func validateExternalSource(src *autoscalingv2.ExternalMetricSource, fldPath *field.Path) field.ErrorList {
	allErrs := validateMetricIdentifier(src.Metric, fldPath.Child("metric"))
	allErrs = append(allErrs, validateMetricTarget(src.Target, fldPath.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if src.Target.Value != nil && src.Target.AverageValue != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return allErrs
}

func validatePodsSource(src *autoscalingv2.PodsMetricSource, fldPath *field.Path) field.ErrorList {
	allErrs := validateMetricIdentifier(src.Metric, fldPath.Child("metric"))
	allErrs = append(allErrs, validateMetricTarget(src.Target, fldPath.Child("target"))...)
	if src.Target.AverageValue == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return allErrs
}

func validateContainerResourceSource(src *autoscalingv2.ContainerResourceMetricSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if src.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), "must specify a resource name"))
	} else {
		allErrs = append(allErrs, corevalidation.ValidateContainerResourceName(src.Name, fldPath.Child("name"))...)
	}
	if src.Container == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("container"), "must specify a container"))
	} else {
		for _, msg := range utilvalidation.IsDNS1123Label(src.Container) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("container"), src.Container, msg))
		}
	}
	return append(allErrs, validateResourceTarget(src.Target, fldPath.Child("target"))...)
}

func validateResourceSource(src *autoscalingv2.ResourceMetricSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if src.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), "must specify a resource name"))
	}
	return append(allErrs, validateResourceTarget(src.Target, fldPath.Child("target"))...)
}

// validateResourceTarget checks a (container) resource metric's target: exactly one of
// averageUtilization and averageValue.
func validateResourceTarget(t autoscalingv2.MetricTarget, fldPath *field.Path) field.ErrorList {
	allErrs := validateMetricTarget(t, fldPath)
	if t.AverageUtilization == nil && t.AverageValue == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return allErrs
}

func validateMetricTarget(t autoscalingv2.MetricTarget, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if t.Type == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("type"), "must specify a metric target type"))
	}
	if t.Type != autoscalingv2.UtilizationMetricType && t.Type != autoscalingv2.ValueMetricType && t.Type != autoscalingv2.AverageValueMetricType {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("value"), t.Value, "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("averageValue"), t.AverageValue, "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("averageUtilization"), t.AverageUtilization, "must be greater than 0"))
	}
	return allErrs
}

func validateMetricIdentifier(id autoscalingv2.MetricIdentifier, fldPath *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(fldPath.Child("name"), "must specify a metric name")}
	}
	var allErrs field.ErrorList
	for _, msg := range path.IsValidPathSegmentName(id.Name) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), id.Name, msg))
	}
	return allErrs
}
