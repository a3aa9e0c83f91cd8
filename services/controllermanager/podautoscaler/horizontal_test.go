package podautoscaler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/podautoscaler"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
)

// start runs a real apiserver and the horizontal-pod-autoscaler controller against it
// as system:kube-controller-manager, with the REST clients kube's controller uses and a
// short sync period; no metrics server is registered. It returns the admin's client.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, _ := startWith(t, 0)
	return cs
}

// startWith is start with the given downscale stabilization window (0: kube's 5
// minutes), also returning the admin's REST config.
func startWith(t *testing.T, downscaleWindow time.Duration) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	cfg := srv.ClientConfig(pki.ControllerManager.CommonName, pki.ControllerManager.Organizations...)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	scales, err := scaleclient.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scaleclient.NewDiscoveryScaleKindResolver(cs.Discovery()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: podautoscaler.EventSource, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	c := podautoscaler.New(podautoscaler.Config{
		Factory: factory, Client: cs, Scales: scales, Mapper: mapper, Recorder: recorder,
		Metrics: podautoscaler.RESTMetricsClient{
			Resource: versioned.NewForConfigOrDie(cfg).MetricsV1beta1(),
			Custom:   custom_metrics.NewForConfig(cfg, mapper, custom_metrics.NewAvailableAPIsGetter(cs.Discovery())),
			External: external_metrics.NewForConfigOrDie(cfg),
		},
		SyncPeriod:                   200 * time.Millisecond,
		DownscaleStabilizationWindow: downscaleWindow,
	})
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return kubernetes.NewForConfigOrDie(srv.Config), srv.Config
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
}

func hpa(name string, minReplicas, maxReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(minReplicas), MaxReplicas: maxReplicas,
		},
	}
}

func until(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

func condition(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) *autoscalingv2.HorizontalPodAutoscalerCondition {
	for i := range h.Status.Conditions {
		if h.Status.Conditions[i].Type == typ {
			return &h.Status.Conditions[i]
		}
	}
	return nil
}

// event waits for an event of the autoscaler with reason whose message holds want.
func event(t *testing.T, cs kubernetes.Interface, name, reason, want string) {
	t.Helper()
	until(t, "event "+reason, func(ctx context.Context) error {
		list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "HorizontalPodAutoscaler" && e.Source.Component == podautoscaler.EventSource && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("%d events, none with %q: %+v", len(list.Items), want, list.Items)
	})
}

// TestWithoutMetricsServer covers what kube's controller does where no metrics API is
// served: a target below minReplicas is scaled up to it, one above maxReplicas down to
// it (SuccessfulRescale), and within the range the cpu metric cannot be read:
// AbleToScale True, ScalingActive False with FailedGetResourceMetric, the
// FailedGetResourceMetric and FailedComputeMetricsReplicas events, and the target left
// alone.
func TestWithoutMetricsServer(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	deployments := cs.AppsV1().Deployments("default")
	hpas := cs.AutoscalingV2().HorizontalPodAutoscalers("default")
	if _, err := deployments.Create(ctx, deployment("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hpas.Create(ctx, hpa("web", 2, 5), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	replicas := func(want int32) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			d, err := deployments.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != want {
				return fmt.Errorf("deployment replicas %d, want %d", *d.Spec.Replicas, want)
			}
			return nil
		}
	}
	until(t, "raised to minReplicas", replicas(2))
	event(t, cs, "web", "SuccessfulRescale", "New size: 2; reason: Current number of replicas below Spec.MinReplicas")

	// The apiserver's 404 for a group nothing serves closes the message (kube-apiserver's
	// plain-text 404 makes client-go end it with "(get pods.metrics.k8s.io)").
	const noMetrics = "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server could not find the requested resource"
	var got *autoscalingv2.HorizontalPodAutoscaler
	until(t, "conditions without metrics", func(ctx context.Context) error {
		h, err := hpas.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = h
		able, active := condition(h, autoscalingv2.AbleToScale), condition(h, autoscalingv2.ScalingActive)
		if able == nil || able.Status != corev1.ConditionTrue || able.Reason != "SucceededGetScale" ||
			able.Message != "the HPA controller was able to get the target's current scale" {
			return fmt.Errorf("AbleToScale %+v", able)
		}
		if active == nil || active.Status != corev1.ConditionFalse || active.Reason != "FailedGetResourceMetric" ||
			!strings.HasPrefix(active.Message, "the HPA was unable to compute the replica count: "+noMetrics) {
			return fmt.Errorf("ScalingActive %+v", active)
		}
		if h.Status.CurrentReplicas != 2 || h.Status.DesiredReplicas != 2 || h.Status.LastScaleTime == nil {
			return fmt.Errorf("status %+v", h.Status)
		}
		return nil
	})
	if len(got.Status.CurrentMetrics) != 1 || got.Status.CurrentMetrics[0].Type != "" {
		t.Errorf("currentMetrics %+v, want the one empty status kube writes for a metric it could not read", got.Status.CurrentMetrics)
	}
	event(t, cs, "web", "FailedGetResourceMetric", noMetrics)
	event(t, cs, "web", "FailedComputeMetricsReplicas", "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: "+noMetrics)
	if err := replicas(2)(ctx); err != nil {
		t.Errorf("without metrics the target moved: %v", err)
	}

	// Above maxReplicas: lowered to it.
	scale, err := deployments.GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 9
	if _, err := deployments.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "lowered to maxReplicas", replicas(5))
	event(t, cs, "web", "SuccessfulRescale", "New size: 5; reason: Current number of replicas above Spec.MaxReplicas")

	// A target that does not exist: AbleToScale False, FailedGetScale.
	if _, err := hpas.Create(ctx, hpa("missing", 1, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "FailedGetScale", func(ctx context.Context) error {
		h, err := hpas.Get(ctx, "missing", metav1.GetOptions{})
		if err != nil {
			return err
		}
		able := condition(h, autoscalingv2.AbleToScale)
		if able == nil || able.Status != corev1.ConditionFalse || able.Reason != "FailedGetScale" ||
			!strings.HasPrefix(able.Message, "the HPA controller was unable to get the target's current scale: ") {
			return fmt.Errorf("AbleToScale %+v", able)
		}
		return nil
	})
	event(t, cs, "missing", "FailedGetScale", `deployments.apps "missing" not found`)
}
