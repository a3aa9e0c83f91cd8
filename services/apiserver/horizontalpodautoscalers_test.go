package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func newHPAV2(name string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MaxReplicas:    5,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceMemory,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("100Mi"))}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](60)}}},
			},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: ptr.To[int32](60),
				Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 30}},
			}},
		},
	}
}

// TestHorizontalPodAutoscalersServedInV2AndV1 covers one stored autoscaler seen through
// autoscaling/v2 and autoscaling/v1: v2's defaults, v1's CPU target and the
// annotations that carry the rest, a v1 write that keeps what only v2 spells, the
// default CPU target of a v1 autoscaler without one, status through both versions'
// status subresource, a watch in each version, validation, discovery and the Table.
func TestHorizontalPodAutoscalersServedInV2AndV1(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	v2, v1 := cs.AutoscalingV2().HorizontalPodAutoscalers("default"), cs.AutoscalingV1().HorizontalPodAutoscalers("default")

	w2, err := v2.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	w1, err := v1.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Stop()

	created, err := v2.Create(ctx, newHPAV2("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.MinReplicas == nil || *created.Spec.MinReplicas != 1 {
		t.Errorf("minReplicas %v, want the default 1", created.Spec.MinReplicas)
	}
	wantUp := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0), SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
	if b := created.Spec.Behavior; b == nil || !apiequality.Semantic.DeepEqual(b.ScaleUp, wantUp) ||
		b.ScaleDown == nil || *b.ScaleDown.StabilizationWindowSeconds != 60 || *b.ScaleDown.SelectPolicy != autoscalingv2.MaxChangePolicySelect ||
		len(b.ScaleDown.Policies) != 1 {
		t.Errorf("behavior not defaulted as kube's: %+v", created.Spec.Behavior)
	}

	t.Run("v1 view", func(t *testing.T) {
		got, err := v1.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion || got.Spec.MaxReplicas != 5 ||
			got.Spec.TargetCPUUtilizationPercentage == nil || *got.Spec.TargetCPUUtilizationPercentage != 60 ||
			got.Spec.ScaleTargetRef.Kind != "Deployment" {
			t.Errorf("v1 view %+v of %+v", got, created)
		}
		var others []autoscalingv1.MetricSpec
		if err := json.Unmarshal([]byte(got.Annotations["autoscaling.alpha.kubernetes.io/metrics"]), &others); err != nil ||
			len(others) != 1 || others[0].Resource == nil || others[0].Resource.Name != corev1.ResourceMemory ||
			others[0].Resource.TargetAverageValue.String() != "100Mi" {
			t.Errorf("metrics annotation %q (%v)", got.Annotations["autoscaling.alpha.kubernetes.io/metrics"], err)
		}
		if !strings.Contains(got.Annotations["autoscaling.alpha.kubernetes.io/behavior"], `"stabilizationWindowSeconds":60`) {
			t.Errorf("behavior annotation %q", got.Annotations["autoscaling.alpha.kubernetes.io/behavior"])
		}

		// A v1 write that keeps the annotations keeps what only v2 spells.
		got.Spec.MaxReplicas = 7
		got.Spec.TargetCPUUtilizationPercentage = ptr.To[int32](50)
		if _, err := v1.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		back, err := v2.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if back.Spec.MaxReplicas != 7 || len(back.Spec.Metrics) != 2 || back.Spec.Metrics[0].Resource.Name != corev1.ResourceMemory ||
			*back.Spec.Metrics[1].Resource.Target.AverageUtilization != 50 || back.Spec.Behavior == nil ||
			*back.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 60 {
			t.Errorf("after a v1 update, v2 reads %+v", back.Spec)
		}
		for k := range back.Annotations {
			if strings.HasPrefix(k, "autoscaling.alpha.kubernetes.io/") {
				t.Errorf("v2 object keeps round-trip annotation %s", k)
			}
		}
	})

	t.Run("v1 without a target gets kube's 80%", func(t *testing.T) {
		hpa := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
			Spec: autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"}, MaxReplicas: 3}}
		got, err := v1.Create(ctx, hpa, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.MinReplicas == nil || *got.Spec.MinReplicas != 1 || got.Spec.TargetCPUUtilizationPercentage == nil || *got.Spec.TargetCPUUtilizationPercentage != 80 {
			t.Errorf("v1 create returned %+v", got.Spec)
		}
		stored, err := v2.Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(stored.Spec.Metrics) != 1 || stored.Spec.Metrics[0].Resource == nil || stored.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
			*stored.Spec.Metrics[0].Resource.Target.AverageUtilization != 80 || stored.Spec.Behavior != nil {
			t.Errorf("v2 reads %+v", stored.Spec)
		}
	})

	t.Run("status through both versions", func(t *testing.T) {
		cur, err := v2.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 3,
			CurrentMetrics: []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
				Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptr.To[int32](42), AverageValue: ptr.To(resource.MustParse("100m"))}}}},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.AbleToScale, Status: corev1.ConditionTrue,
				Reason: "SucceededGetScale", Message: "the HPA controller was able to get the target's current scale", LastTransitionTime: metav1.Now()}}}
		cur.Spec.MaxReplicas = 99 // ignored by the status subresource
		if _, err := v2.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := v1.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.MaxReplicas != 7 || got.Status.CurrentReplicas != 2 || got.Status.DesiredReplicas != 3 ||
			got.Status.CurrentCPUUtilizationPercentage == nil || *got.Status.CurrentCPUUtilizationPercentage != 42 ||
			!strings.Contains(got.Annotations["autoscaling.alpha.kubernetes.io/conditions"], "SucceededGetScale") {
			t.Errorf("v1 view of the status: spec %+v status %+v annotations %v", got.Spec, got.Status, got.Annotations)
		}
		// A v1 status write keeps the conditions it carries in its annotation.
		got.Status.DesiredReplicas = 4
		got.Spec.MaxReplicas = 1
		if _, err := v1.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		back, err := v2.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if back.Spec.MaxReplicas != 7 || back.Status.DesiredReplicas != 4 || len(back.Status.Conditions) != 1 ||
			back.Status.Conditions[0].Reason != "SucceededGetScale" || len(back.Status.CurrentMetrics) != 1 ||
			back.Status.CurrentMetrics[0].Resource.Current.AverageValue.String() != "100m" {
			t.Errorf("after a v1 status update v2 reads spec %+v status %+v", back.Spec, back.Status)
		}
		bad := back.DeepCopy()
		bad.Status.CurrentReplicas = -1
		if _, err := v2.UpdateStatus(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			!strings.Contains(err.Error(), "status.currentReplicas: Invalid value: -1: must be greater than or equal to 0") {
			t.Errorf("negative currentReplicas: %v", err)
		}
	})

	t.Run("watch in each version", func(t *testing.T) {
		for name, w := range map[string]watch.Interface{"v2": w2, "v1": w1} {
			deadline := time.After(10 * time.Second)
			seen := 0
			for seen < 5 { // web: added, updated, status twice; plain: added
				select {
				case ev := <-w.ResultChan():
					seen++
					switch obj := ev.Object.(type) {
					case *autoscalingv2.HorizontalPodAutoscaler:
						if name != "v2" {
							t.Errorf("%s watch sent %T", name, obj)
						}
					case *autoscalingv1.HorizontalPodAutoscaler:
						if name != "v1" {
							t.Errorf("%s watch sent %T", name, obj)
						}
						if obj.Name == "web" && ev.Type == watch.Added && (obj.Spec.TargetCPUUtilizationPercentage == nil || *obj.Spec.TargetCPUUtilizationPercentage != 60) {
							t.Errorf("v1 watch: %+v", obj.Spec)
						}
					default:
						t.Errorf("%s watch sent %s %T", name, ev.Type, ev.Object)
					}
				case <-deadline:
					t.Fatalf("%s watch: %d events, want 5", name, seen)
				}
			}
		}
	})

	t.Run("validation", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			modify func(*autoscalingv2.HorizontalPodAutoscaler)
			want   string
		}{
			{"min 0", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = ptr.To[int32](0) },
				"spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"},
			{"max below min", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = ptr.To[int32](6) },
				"spec.maxReplicas: Invalid value: 5: must be greater than or equal to `minReplicas`"},
			{"max 0", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = 0 },
				"spec.maxReplicas: Invalid value: 0: must be greater than 0"},
			{"no kind", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.Kind = "" },
				"spec.scaleTargetRef.kind: Required value"},
			{"no name", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.Name = "" },
				"spec.scaleTargetRef.name: Required value"},
			{"resource type without resource", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[0].Resource = nil },
				"spec.metrics[0].resource: Required value: must populate information for the given metric source"},
			{"both targets", func(h *autoscalingv2.HorizontalPodAutoscaler) {
				h.Spec.Metrics[1].Resource.Target.AverageValue = ptr.To(resource.MustParse("1"))
			}, "spec.metrics[1].resource.target.averageValue: Forbidden: may not set both a target raw value and a target utilization"},
			{"bad policy", func(h *autoscalingv2.HorizontalPodAutoscaler) {
				h.Spec.Behavior.ScaleDown.Policies[0].PeriodSeconds = 1801
			},
				"spec.behavior.scaleDown.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800"},
		} {
			h := newHPAV2("bad")
			tc.modify(h)
			_, err := v2.Create(ctx, h, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `HorizontalPodAutoscaler.autoscaling "bad" is invalid`) {
				t.Errorf("%s: %v, want 422 with %q", tc.name, err, tc.want)
			}
		}
		// Through v1 too: the v1 object is judged once converted.
		bad := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: "Deployment", Name: "web"},
				MinReplicas: ptr.To[int32](0), MaxReplicas: 1}}
		if _, err := v1.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1") {
			t.Errorf("v1 minReplicas 0: %v", err)
		}
	})

	t.Run("discovery and table", func(t *testing.T) {
		groups, err := cs.Discovery().ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, g := range groups.Groups {
			if g.Name != "autoscaling" {
				continue
			}
			found = true
			if len(g.Versions) != 2 || g.Versions[0].Version != "v2" || g.Versions[1].Version != "v1" || g.PreferredVersion.Version != "v2" {
				t.Errorf("autoscaling group %+v", g)
			}
		}
		if !found {
			t.Fatal("no autoscaling group in discovery")
		}
		for _, gv := range []string{"autoscaling/v2", "autoscaling/v1"} {
			list, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]metav1.APIResource{}
			for _, r := range list.APIResources {
				names[r.Name] = r
			}
			hpa, ok := names["horizontalpodautoscalers"]
			if !ok || !hpa.Namespaced || hpa.Kind != "HorizontalPodAutoscaler" || len(hpa.ShortNames) != 1 || hpa.ShortNames[0] != "hpa" ||
				len(hpa.Categories) != 1 || hpa.Categories[0] != "all" {
				t.Errorf("%s horizontalpodautoscalers: %+v", gv, hpa)
			}
			if _, ok := names["horizontalpodautoscalers/status"]; !ok {
				t.Errorf("%s lacks horizontalpodautoscalers/status", gv)
			}
		}
		raw, err := cs.AutoscalingV1().RESTClient().Get().Namespace("default").Resource("horizontalpodautoscalers").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatal(err)
		}
		var cols []string
		for _, c := range table.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if strings.Join(cols, " ") != "Name Reference Targets MinPods MaxPods Replicas Age" || len(table.Rows) != 2 {
			t.Fatalf("table columns %v, %d rows", cols, len(table.Rows))
		}
		// plain comes before web; a metric's current value is the status at its index, as
		// kube prints it (here the one status, cpu's, is printed as memory's).
		row := table.Rows[1].Cells
		if table.Rows[0].Cells[0] != "plain" || row[0] != "web" || row[1] != "Deployment/web" || row[2] != "memory: 100m/100Mi, cpu: <unknown>/50%" ||
			row[3] != "1" || row[4] != float64(7) || row[5] != float64(2) {
			t.Errorf("row %v", row)
		}
	})
}
