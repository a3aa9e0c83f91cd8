package scheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/scheduler"
)

// The pod's trace as the apiserver would have stored it.
const (
	podTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	podParentSpan = "00f067aa0ba902b7"
)

func TestSchedulingCycleContinuesThePodTraceAndRecordsEvents(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	createReadyNode(t, admin, "node-a", "2")

	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(context.Background(), tracing.Config{Service: "scheduler", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client := kubernetes.NewForConfigOrDie(cfg)
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "default-scheduler", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{Client: client, Recorder: recorder, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = sched.Run(ctx) }()
	go func() { defer wg.Done(); _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "traced", Namespace: "default",
			Annotations: map[string]string{tracing.TraceparentAnnotation: "00-" + podTraceID + "-" + podParentSpan + "-01"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, admin, "huge", "100")
	waitForPod(t, admin, "traced", "bound", func(p *v1.Pod) bool { return p.Spec.NodeName == "node-a" })

	t.Run("Scheduled event", func(t *testing.T) {
		ev := waitForEvent(t, admin, "involvedObject.name=traced,reason=Scheduled")
		if ev.Type != v1.EventTypeNormal || ev.Message != "Successfully assigned default/traced to node-a" || ev.Source.Component != "default-scheduler" {
			t.Fatalf("event = %s %q from %q", ev.Type, ev.Message, ev.Source.Component)
		}
	})
	t.Run("FailedScheduling event says why no node fits", func(t *testing.T) {
		ev := waitForEvent(t, admin, "involvedObject.name=huge,reason=FailedScheduling")
		if ev.Type != v1.EventTypeWarning || !strings.HasPrefix(ev.Message, "0/1 nodes are available: 1 Insufficient cpu.") {
			t.Fatalf("event = %s %q", ev.Type, ev.Message)
		}
	})
	t.Run("spans", func(t *testing.T) {
		byName := map[string]tracetest.SpanStub{}
		// Wait for the Bind span; on timeout the checks below say what is missing.
		_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for _, s := range exp.GetSpans() {
				if s.SpanContext.TraceID().String() == podTraceID {
					byName[s.Name] = s
				}
			}
			_, ok := byName["Bind"]
			return ok, nil
		})
		cycle, ok := byName["SchedulingCycle"]
		if !ok {
			t.Fatalf("no SchedulingCycle span in the pod's trace; spans: %v", names(byName))
		}
		if cycle.Parent.SpanID().String() != podParentSpan {
			t.Errorf("SchedulingCycle parent = %s, want the pod's span %s", cycle.Parent.SpanID(), podParentSpan)
		}
		attrs := map[string]string{}
		for _, kv := range cycle.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["k8s.pod.name"] != "traced" || attrs["k8s.namespace.name"] != "default" || attrs["k8s.pod.uid"] == "" {
			t.Errorf("SchedulingCycle attributes = %v", attrs)
		}
		for _, child := range []string{"Filter", "Score", "Bind"} {
			s, ok := byName[child]
			if !ok {
				t.Errorf("no %s span; spans: %v", child, names(byName))
				continue
			}
			if s.Parent.SpanID() != cycle.SpanContext.SpanID() {
				t.Errorf("%s is not a child of SchedulingCycle", child)
			}
		}
		bindPost, ok := byName["POST /api/v1/namespaces/default/pods/traced/binding"]
		if !ok || bindPost.Parent.SpanID() != byName["Bind"].SpanContext.SpanID() {
			t.Errorf("the binding POST is not a child of Bind; spans: %v", names(byName))
		}
	})
}

func names(spans map[string]tracetest.SpanStub) []string {
	var out []string
	for n := range spans {
		out = append(out, n)
	}
	return out
}

func waitForEvent(t *testing.T, client kubernetes.Interface, selector string) v1.Event {
	t.Helper()
	var found v1.Event
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: selector})
		if lastErr = err; err != nil || len(list.Items) == 0 {
			return false, nil
		}
		found = list.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no event matching %s: %v (last error %v)", selector, err, lastErr)
	}
	return found
}
