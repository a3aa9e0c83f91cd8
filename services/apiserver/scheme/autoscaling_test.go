package scheme

import (
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// fullHPA uses every metric source and status, a behavior and a condition, with the
// cpu utilization metric last (where a v1 round trip puts it).
func fullHPA() *autoscalingv2.HorizontalPodAutoscaler {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	ref := autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "front", APIVersion: "v1"}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{"keep": "me"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MinReplicas:    ptr.To[int32](2), MaxReplicas: 9,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps", Selector: sel},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("10")}}},
				{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{DescribedObject: ref, Metric: autoscalingv2.MetricIdentifier{Name: "hits"},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q("100")}}},
				{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("30")}}},
				{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{Name: corev1.ResourceMemory, Container: "app",
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("1Gi")}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](70)}}},
			},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: ptr.To[int32](10), SelectPolicy: ptr.To(autoscalingv2.MinChangePolicySelect),
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}}},
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{
			ObservedGeneration: ptr.To[int64](3), CurrentReplicas: 3, DesiredReplicas: 4,
			CurrentMetrics: []autoscalingv2.MetricStatus{
				{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: "qps", Selector: sel},
					Current: autoscalingv2.MetricValueStatus{AverageValue: q("12")}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
					Current: autoscalingv2.MetricValueStatus{AverageValue: q("250m"), AverageUtilization: ptr.To[int32](55)}}},
			},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse,
				Reason: "FailedGetResourceMetric", Message: "m", LastTransitionTime: metav1.Unix(1700000000, 0)}},
		},
	}
}

// TestHPAConversionRoundTrips converts a v2 autoscaler to v1 and back through Scheme:
// the same object, the v1 form holding the cpu target in its spec and status and the
// rest in kube's annotations.
func TestHPAConversionRoundTrips(t *testing.T) {
	in := fullHPA()
	var v1 autoscalingv1.HorizontalPodAutoscaler
	if err := Scheme.Convert(in, &v1, nil); err != nil {
		t.Fatal(err)
	}
	if *v1.Spec.TargetCPUUtilizationPercentage != 70 || *v1.Status.CurrentCPUUtilizationPercentage != 55 || v1.Annotations["keep"] != "me" {
		t.Errorf("v1 %+v", v1)
	}
	for _, k := range []string{MetricSpecsAnnotation, MetricStatusesAnnotation, HorizontalPodAutoscalerConditionsAnnotation, BehaviorSpecsAnnotation} {
		if v1.Annotations[k] == "" {
			t.Errorf("v1 lacks annotation %s", k)
		}
	}
	var back autoscalingv2.HorizontalPodAutoscaler
	if err := Scheme.Convert(&v1, &back, nil); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(in, &back) {
		t.Errorf("round trip changed the object:\n%+v\n%+v", in, &back)
	}
	// Annotations of that name a v2 client wrote are not kept through v1.
	in.Annotations[MetricSpecsAnnotation] = "[]"
	if err := Scheme.Convert(in, &v1, nil); err != nil {
		t.Fatal(err)
	}
	if err := Scheme.Convert(&v1, &back, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Annotations[MetricSpecsAnnotation]; ok || len(back.Spec.Metrics) != 5 {
		t.Errorf("stale round-trip annotation survived: %v, %d metrics", back.Annotations, len(back.Spec.Metrics))
	}
}
