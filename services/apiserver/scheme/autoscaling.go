package scheme

import (
	"encoding/json"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

// A HorizontalPodAutoscaler is stored once, as autoscaling/v2 (kube's storage version),
// and served in autoscaling/v2 and autoscaling/v1. autoscaling/v1 has one metric,
// spec.targetCPUUtilizationPercentage (status.currentCPUUtilizationPercentage); what
// else v2 holds travels through v1 in annotations, as kube's conversion does
// (k8s.io/kubernetes/pkg/apis/autoscaling/v1/conversion.go, annotations.go): the other
// metric specs, every metric status, the conditions and the behavior. kube converts
// both versions through its internal HorizontalPodAutoscaler; skiff, which keeps no
// internal versions, converts v1 and v2 into each other directly, with the same result.

// The annotations that carry, through autoscaling/v1, what only autoscaling/v2 has.
// Mirrors k8s.io/kubernetes/pkg/apis/autoscaling/annotations.go.
const (
	// MetricSpecsAnnotation holds, as JSON autoscaling/v1 MetricSpecs, the metrics
	// other than a CPU utilization target.
	MetricSpecsAnnotation = "autoscaling.alpha.kubernetes.io/metrics"
	// MetricStatusesAnnotation holds, as JSON autoscaling/v1 MetricStatuses, every
	// current metric.
	MetricStatusesAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	// HorizontalPodAutoscalerConditionsAnnotation holds the status conditions.
	HorizontalPodAutoscalerConditionsAnnotation = "autoscaling.alpha.kubernetes.io/conditions"
	// BehaviorSpecsAnnotation holds spec.behavior, as autoscaling/v2 JSON.
	BehaviorSpecsAnnotation = "autoscaling.alpha.kubernetes.io/behavior"
	// DefaultCPUUtilization is the CPU utilization target, in percent, of an
	// autoscaler that names no metric.
	DefaultCPUUtilization = 80
)

var roundTripAnnotations = []string{MetricSpecsAnnotation, MetricStatusesAnnotation,
	HorizontalPodAutoscalerConditionsAnnotation, BehaviorSpecsAnnotation}

// dropRoundTripAnnotations returns in without the round-trip annotations: a copy when
// it held any, in itself otherwise. Mirrors DropRoundTripHorizontalPodAutoscalerAnnotations.
func dropRoundTripAnnotations(in map[string]string) map[string]string {
	found := false
	for _, k := range roundTripAnnotations {
		_, ok := in[k]
		found = found || ok
	}
	if !found {
		return in
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	for _, k := range roundTripAnnotations {
		delete(out, k)
	}
	return out
}

// isCPUUtilization reports whether m is a Resource metric on cpu with a Utilization
// (averageUtilization) target: the one metric autoscaling/v1 spells in its spec.
func isCPUUtilization(m *autoscalingv2.MetricSpec) bool {
	return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil &&
		m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil
}

// ConvertHPAV2ToV1 fills out, an autoscaling/v1 HorizontalPodAutoscaler, from in, an
// autoscaling/v2 one: targetCPUUtilizationPercentage is the first cpu Utilization
// metric's target, currentCPUUtilizationPercentage the cpu metric status's
// averageUtilization; the other metrics, the metric statuses, the conditions and the
// behavior go into the round-trip annotations (any such annotation in in is dropped
// first). out shares nothing with in; its TypeMeta is left empty. Mirrors
// Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler.
func ConvertHPAV2ToV1(in *autoscalingv2.HorizontalPodAutoscaler, out *autoscalingv1.HorizontalPodAutoscaler) error {
	*out = autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	out.Annotations = dropRoundTripAnnotations(out.Annotations)
	out.Spec = autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
		MinReplicas:    copyInt32(in.Spec.MinReplicas),
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	var others []autoscalingv1.MetricSpec
	cpuSeen := false
	for i := range in.Spec.Metrics {
		m := &in.Spec.Metrics[i]
		if isCPUUtilization(m) {
			if !cpuSeen {
				out.Spec.TargetCPUUtilizationPercentage = copyInt32(m.Resource.Target.AverageUtilization)
				cpuSeen = true
			}
			continue
		}
		others = append(others, metricSpecV2ToV1(m))
	}
	st := &in.Status
	out.Status = autoscalingv1.HorizontalPodAutoscalerStatus{
		ObservedGeneration: copyInt64(st.ObservedGeneration),
		LastScaleTime:      st.LastScaleTime.DeepCopy(),
		CurrentReplicas:    st.CurrentReplicas,
		DesiredReplicas:    st.DesiredReplicas,
	}
	statuses := make([]autoscalingv1.MetricStatus, len(st.CurrentMetrics))
	for i := range st.CurrentMetrics {
		m := &st.CurrentMetrics[i]
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Current.AverageUtilization != nil {
			out.Status.CurrentCPUUtilizationPercentage = copyInt32(m.Resource.Current.AverageUtilization)
		}
		statuses[i] = metricStatusV2ToV1(m)
	}
	conditions := make([]autoscalingv1.HorizontalPodAutoscalerCondition, len(st.Conditions))
	for i, c := range st.Conditions {
		conditions[i] = autoscalingv1.HorizontalPodAutoscalerCondition{
			Type: autoscalingv1.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
			LastTransitionTime: *c.LastTransitionTime.DeepCopy(), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: copyInt64(c.ObservedGeneration),
		}
	}
	annotate := func(key string, v interface{}) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[key] = string(data)
		return nil
	}
	if len(others) > 0 {
		if err := annotate(MetricSpecsAnnotation, others); err != nil {
			return err
		}
	}
	if len(statuses) > 0 {
		if err := annotate(MetricStatusesAnnotation, statuses); err != nil {
			return err
		}
	}
	if in.Spec.Behavior != nil {
		if err := annotate(BehaviorSpecsAnnotation, in.Spec.Behavior); err != nil {
			return err
		}
	}
	if len(conditions) > 0 {
		if err := annotate(HorizontalPodAutoscalerConditionsAnnotation, conditions); err != nil {
			return err
		}
	}
	return nil
}

// ConvertHPAV1ToV2 fills out, an autoscaling/v2 HorizontalPodAutoscaler, from in, an
// autoscaling/v1 one: the metrics of the metrics annotation, then
// targetCPUUtilizationPercentage as a cpu Utilization metric (a cpu target of
// DefaultCPUUtilization when there is no metric at all); the behavior, metric statuses
// and conditions from their annotations (status.currentCPUUtilizationPercentage when
// there is no statuses annotation). An annotation that does not parse is ignored, and
// every round-trip annotation is dropped. Mirrors
// Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler.
func ConvertHPAV1ToV2(in *autoscalingv1.HorizontalPodAutoscaler, out *autoscalingv2.HorizontalPodAutoscaler) {
	*out = autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	out.Spec = autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
		MinReplicas:    copyInt32(in.Spec.MinReplicas),
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	var cpu []autoscalingv2.MetricSpec
	if in.Spec.TargetCPUUtilizationPercentage != nil {
		cpu = []autoscalingv2.MetricSpec{cpuUtilization(*in.Spec.TargetCPUUtilizationPercentage)}
	}
	out.Spec.Metrics = cpu
	if enc, ok := in.Annotations[MetricSpecsAnnotation]; ok {
		var others []autoscalingv1.MetricSpec
		if json.Unmarshal([]byte(enc), &others) == nil {
			metrics := make([]autoscalingv2.MetricSpec, 0, len(others)+len(cpu))
			for i := range others {
				metrics = append(metrics, metricSpecV1ToV2(&others[i]))
			}
			out.Spec.Metrics = append(metrics, cpu...)
		}
	}
	if enc, ok := in.Annotations[BehaviorSpecsAnnotation]; ok {
		var behavior autoscalingv2.HorizontalPodAutoscalerBehavior
		if json.Unmarshal([]byte(enc), &behavior) == nil && (behavior.ScaleUp != nil || behavior.ScaleDown != nil) {
			out.Spec.Behavior = &behavior
		}
	}
	st := &in.Status
	out.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: copyInt64(st.ObservedGeneration),
		LastScaleTime:      st.LastScaleTime.DeepCopy(),
		CurrentReplicas:    st.CurrentReplicas,
		DesiredReplicas:    st.DesiredReplicas,
	}
	if st.CurrentCPUUtilizationPercentage != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
				Current: autoscalingv2.MetricValueStatus{AverageUtilization: copyInt32(st.CurrentCPUUtilizationPercentage)}}}}
	}
	if enc, ok := in.Annotations[MetricStatusesAnnotation]; ok {
		var statuses []autoscalingv1.MetricStatus
		if json.Unmarshal([]byte(enc), &statuses) == nil {
			out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, len(statuses))
			for i := range statuses {
				out.Status.CurrentMetrics[i] = metricStatusV1ToV2(&statuses[i])
			}
		}
	}
	if len(out.Spec.Metrics) == 0 {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(DefaultCPUUtilization)}
	}
	if enc, ok := in.Annotations[HorizontalPodAutoscalerConditionsAnnotation]; ok {
		var conditions []autoscalingv1.HorizontalPodAutoscalerCondition
		if json.Unmarshal([]byte(enc), &conditions) == nil {
			out.Status.Conditions = make([]autoscalingv2.HorizontalPodAutoscalerCondition, len(conditions))
			for i, c := range conditions {
				out.Status.Conditions[i] = autoscalingv2.HorizontalPodAutoscalerCondition{
					Type: autoscalingv2.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
					LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message,
					ObservedGeneration: c.ObservedGeneration,
				}
			}
		}
	}
	out.Annotations = dropRoundTripAnnotations(out.Annotations)
}

// cpuUtilization is a Resource metric targeting percent average CPU utilization.
func cpuUtilization(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &percent}}}
}

// metricSpecV2ToV1 converts one metric spec: a target's value, averageValue and
// averageUtilization land in v1's targetValue, targetAverageValue and
// targetAverageUtilization. Mirrors the generated MetricSpec conversion and its
// hand-written source conversions.
func metricSpecV2ToV1(in *autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricSource{
			Target:       autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName:   s.Metric.Name,
			Selector:     s.Metric.Selector.DeepCopy(),
			AverageValue: copyQuantity(s.Target.AverageValue),
		}
		if s.Target.Value != nil {
			out.Object.TargetValue = s.Target.Value.DeepCopy()
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: s.Metric.Name, Selector: s.Metric.Selector.DeepCopy()}
		if s.Target.AverageValue != nil {
			out.Pods.TargetAverageValue = s.Target.AverageValue.DeepCopy()
		}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: s.Name,
			TargetAverageUtilization: copyInt32(s.Target.AverageUtilization), TargetAverageValue: copyQuantity(s.Target.AverageValue)}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{Name: s.Name, Container: s.Container,
			TargetAverageUtilization: copyInt32(s.Target.AverageUtilization), TargetAverageValue: copyQuantity(s.Target.AverageValue)}
	}
	if s := in.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector.DeepCopy(),
			TargetValue: copyQuantity(s.Target.Value), TargetAverageValue: copyQuantity(s.Target.AverageValue)}
	}
	return out
}

// metricSpecV1ToV2 is metricSpecV2ToV1's inverse; a target's type follows from what is
// set (Utilization when a utilization is, Value for an object without averageValue or
// an external metric with targetValue, AverageValue otherwise).
func metricSpecV1ToV2(in *autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		typ := autoscalingv2.ValueMetricType
		if s.AverageValue != nil {
			typ = autoscalingv2.AverageValueMetricType
		}
		value := s.TargetValue.DeepCopy()
		out.Object = &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric:          autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector.DeepCopy()},
			Target:          autoscalingv2.MetricTarget{Type: typ, Value: &value, AverageValue: copyQuantity(s.AverageValue)},
		}
	}
	if s := in.Pods; s != nil {
		avg := s.TargetAverageValue.DeepCopy()
		out.Pods = &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector.DeepCopy()},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &avg},
		}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: s.Name, Target: resourceTarget(s.TargetAverageUtilization, s.TargetAverageValue)}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: s.Name, Container: s.Container,
			Target: resourceTarget(s.TargetAverageUtilization, s.TargetAverageValue)}
	}
	if s := in.External; s != nil {
		typ := autoscalingv2.AverageValueMetricType
		if s.TargetValue != nil {
			typ = autoscalingv2.ValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector.DeepCopy()},
			Target: autoscalingv2.MetricTarget{Type: typ, Value: copyQuantity(s.TargetValue), AverageValue: copyQuantity(s.TargetAverageValue)},
		}
	}
	return out
}

// resourceTarget is a (container) resource metric's v2 target: Utilization when
// utilization is set, AverageValue otherwise.
func resourceTarget(utilization *int32, averageValue *resource.Quantity) autoscalingv2.MetricTarget {
	typ := autoscalingv2.AverageValueMetricType
	if utilization != nil {
		typ = autoscalingv2.UtilizationMetricType
	}
	return autoscalingv2.MetricTarget{Type: typ, AverageUtilization: copyInt32(utilization), AverageValue: copyQuantity(averageValue)}
}

// metricStatusV2ToV1 converts one metric status (current value and averageValue
// become v1's currentValue and currentAverageValue).
func metricStatusV2ToV1(in *autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricStatus{Target: autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName: s.Metric.Name, Selector: s.Metric.Selector.DeepCopy(), AverageValue: copyQuantity(s.Current.AverageValue)}
		if s.Current.Value != nil {
			out.Object.CurrentValue = s.Current.Value.DeepCopy()
		}
	}
	if s := in.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: s.Metric.Name, Selector: s.Metric.Selector.DeepCopy()}
		if s.Current.AverageValue != nil {
			out.Pods.CurrentAverageValue = s.Current.AverageValue.DeepCopy()
		}
	}
	if s := in.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricStatus{Name: s.Name, CurrentAverageUtilization: copyInt32(s.Current.AverageUtilization)}
		if s.Current.AverageValue != nil {
			out.Resource.CurrentAverageValue = s.Current.AverageValue.DeepCopy()
		}
	}
	if s := in.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			CurrentAverageUtilization: copyInt32(s.Current.AverageUtilization)}
		if s.Current.AverageValue != nil {
			out.ContainerResource.CurrentAverageValue = s.Current.AverageValue.DeepCopy()
		}
	}
	if s := in.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricStatus{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector.DeepCopy(),
			CurrentAverageValue: copyQuantity(s.Current.AverageValue)}
		if s.Current.Value != nil {
			out.External.CurrentValue = s.Current.Value.DeepCopy()
		}
	}
	return out
}

// metricStatusV1ToV2 is metricStatusV2ToV1's inverse.
func metricStatusV1ToV2(in *autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(in.Type)}
	if s := in.Object; s != nil {
		value := s.CurrentValue.DeepCopy()
		out.Object = &autoscalingv2.ObjectMetricStatus{DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{Value: &value, AverageValue: copyQuantity(s.AverageValue)}}
	}
	if s := in.Pods; s != nil {
		avg := s.CurrentAverageValue.DeepCopy()
		out.Pods = &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{AverageValue: &avg}}
	}
	if s := in.Resource; s != nil {
		avg := s.CurrentAverageValue.DeepCopy()
		out.Resource = &autoscalingv2.ResourceMetricStatus{Name: s.Name,
			Current: autoscalingv2.MetricValueStatus{AverageValue: &avg, AverageUtilization: copyInt32(s.CurrentAverageUtilization)}}
	}
	if s := in.ContainerResource; s != nil {
		avg := s.CurrentAverageValue.DeepCopy()
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			Current: autoscalingv2.MetricValueStatus{AverageValue: &avg, AverageUtilization: copyInt32(s.CurrentAverageUtilization)}}
	}
	if s := in.External; s != nil {
		value := s.CurrentValue.DeepCopy()
		out.External = &autoscalingv2.ExternalMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{Value: &value, AverageValue: copyQuantity(s.CurrentAverageValue)}}
	}
	return out
}

func copyInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyInt64(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	c := q.DeepCopy()
	return &c
}

// addAutoscalingConversions registers the two HorizontalPodAutoscaler conversions in s.
func addAutoscalingConversions(s *runtime.Scheme) error {
	if err := s.AddConversionFunc((*autoscalingv2.HorizontalPodAutoscaler)(nil), (*autoscalingv1.HorizontalPodAutoscaler)(nil), func(a, b interface{}, _ conversion.Scope) error {
		return ConvertHPAV2ToV1(a.(*autoscalingv2.HorizontalPodAutoscaler), b.(*autoscalingv1.HorizontalPodAutoscaler))
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*autoscalingv1.HorizontalPodAutoscaler)(nil), (*autoscalingv2.HorizontalPodAutoscaler)(nil), func(a, b interface{}, _ conversion.Scope) error {
		ConvertHPAV1ToV2(a.(*autoscalingv1.HorizontalPodAutoscaler), b.(*autoscalingv2.HorizontalPodAutoscaler))
		return nil
	})
}
