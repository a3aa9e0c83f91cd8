package allinone_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/allinone"
	"skiff.dev/services/internal/tracing"
)

// TestOnePodIsOneTrace: a pod created with a traceparent header
// yields ONE trace holding, under the client's root span, every hop of the pod's
// creation, each span from the service that did the work.
func TestOnePodIsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	ctx, cancel := context.WithCancel(context.Background())
	cluster, stopped, err := allinone.Start(ctx, allinone.Config{
		DataDir: t.TempDir(), BindAddress: "127.0.0.1", Runtime: allinone.RuntimeSim, NodeName: "trace-node",
		TraceExporter: exp,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := stopped(); err != nil {
			t.Errorf("all-in-one stopped with %v", err)
		}
	})
	if cluster.NATSURL == "" {
		t.Fatal("the all-in-one runs without NATS")
	}

	// The client: its own service in the same exporter, sending traceparent.
	clientTP, err := tracing.NewProvider(ctx, tracing.Config{Service: "e2e-client", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	restConfig.WrapTransport = tracing.WrapTransport(clientTP)
	client := kubernetes.NewForConfigOrDie(restConfig)

	rootCtx, root := clientTP.Tracer("e2e").Start(ctx, "kubectl run traced")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "traced", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox:trace"}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(rootCtx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root.End()
	traceID := root.SpanContext().TraceID()

	// One span per hop, by service and name.
	want := []struct{ service, name string }{
		{"skiff-apiserver", "POST /api/v1/namespaces/default/pods"},
		{"skiff-apiserver", "etcdserverpb.KV/Txn"},
		{"skiff-scheduler", "SchedulingCycle"},
		{"skiff-scheduler", "Filter"},
		{"skiff-scheduler", "Bind"},
		{"skiff-apiserver", "POST /api/v1/namespaces/default/pods/traced/binding"},
		{"skiff-kubelet", "SyncPod"},
		{"skiff-kubelet", "runtime.v1.RuntimeService/RunPodSandbox"},
		{"skiff-kubelet", "runtime.v1.ImageService/PullImage"},
		{"skiff-kubelet", "runtime.v1.RuntimeService/CreateContainer"},
		{"skiff-kubelet", "runtime.v1.RuntimeService/StartContainer"},
		{"skiff-runtime", "runtime.v1.RuntimeService/StartContainer"},
		{"skiff-kubelet", "UpdatePodStatus"},
		{"skiff-apiserver", "PUT /api/v1/namespaces/default/pods/traced/status"},
	}
	var spans []tracetest.SpanStub
	var missing []string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		spans = spans[:0]
		have := map[string]bool{}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == traceID {
				spans = append(spans, s)
				have[service(s)+" "+s.Name] = true
			}
		}
		missing = missing[:0]
		for _, w := range want {
			if !have[w.service+" "+w.name] {
				missing = append(missing, w.service+" "+w.name)
			}
		}
		return len(missing) == 0, nil
	}); err != nil {
		t.Fatalf("the pod's trace lacks %v; it holds:\n%s", missing, describe(spans))
	}

	// Every span hangs from the client's root: no span's parent is missing.
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	for _, s := range spans {
		if s.Parent.IsValid() && !ids[s.Parent.SpanID()] {
			t.Errorf("span %s (%s) has a parent outside the trace", s.Name, service(s))
		}
		if !s.Parent.IsValid() && s.SpanContext.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %s (%s) is a second root", s.Name, service(s))
		}
	}
	t.Logf("the pod's trace:\n%s", describe(spans))

	// Deleting the pod is a trace of its own, linked to the pod's: the apiserver's
	// DELETE and the kubelet's SyncTerminatingPod both point back at the creation.
	delCtx, del := clientTP.Tracer("e2e").Start(ctx, "kubectl delete pod traced")
	if err := client.CoreV1().Pods("default").Delete(delCtx, "traced", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	del.End()
	linked := func(name, svc string) bool {
		for _, s := range exp.GetSpans() {
			if s.Name != name || service(s) != svc || s.SpanContext.TraceID() == traceID {
				continue
			}
			for _, l := range s.Links {
				if l.SpanContext.TraceID() == traceID {
					return true
				}
			}
		}
		return false
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return linked("DELETE /api/v1/namespaces/default/pods/traced", "skiff-apiserver") && linked("SyncTerminatingPod", "skiff-kubelet"), nil
	}); err != nil {
		t.Fatalf("no DELETE (apiserver) and SyncTerminatingPod (kubelet) spans linked to the pod's trace")
	}
}

func service(s tracetest.SpanStub) string {
	for _, kv := range s.Resource.Attributes() {
		if kv.Key == "service.name" {
			return kv.Value.AsString()
		}
	}
	return ""
}

// describe prints the spans as a tree, children under parents, in start order.
func describe(spans []tracetest.SpanStub) string {
	sort.Slice(spans, func(i, j int) bool { return spans[i].StartTime.Before(spans[j].StartTime) })
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.IsValid() && ids[s.Parent.SpanID()] {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%s [%s]\n", strings.Repeat("  ", depth), s.Name, service(s))
		for _, c := range children[s.SpanContext.SpanID()] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
