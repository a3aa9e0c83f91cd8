package kubelet_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet"
)

const (
	podTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	podParentSpan = "00f067aa0ba902b7"
)

func TestSyncPodContinuesThePodTraceAndRecordsEvents(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	cri := startSim(t)

	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(context.Background(), tracing.Config{Service: "kubelet", NodeName: nodeName, Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client := kubernetes.NewForConfigOrDie(cfg)
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "kubelet", Host: nodeName, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	kl, err := kubelet.New(kubelet.Config{
		NodeName: nodeName, Client: client, RuntimeEndpoint: cri.Socket, RootDir: rootDir(t),
		Recorder: recorder, TracerProvider: tp, PodCIDR: sim.PodCIDR,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = kl.Run(ctx) }()
	go func() { defer wg.Done(); _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	pod := newPod("traced", v1.RestartPolicyAlways, map[string]string{tracing.TraceparentAnnotation: "00-" + podTraceID + "-" + podParentSpan + "-01"})
	created, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod running", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "traced", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})

	t.Run("events in order", func(t *testing.T) {
		want := []string{"Pulling", "Pulled", "Created", "Started"}
		var got []string
		eventually(t, 20*time.Second, "kubelet events", func() error {
			list, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=traced,involvedObject.namespace=default,involvedObject.uid=" + string(created.UID)})
			if err != nil {
				return err
			}
			items := list.Items
			sort.SliceStable(items, func(i, j int) bool { return items[i].Name < items[j].Name })
			got = nil
			for _, ev := range items {
				got = append(got, ev.Reason)
				if ev.Source.Component != "kubelet" || ev.Source.Host != nodeName || ev.InvolvedObject.FieldPath != "spec.containers{main}" {
					return fmt.Errorf("event %s: source %+v fieldPath %q", ev.Reason, ev.Source, ev.InvolvedObject.FieldPath)
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				return fmt.Errorf("reasons %v, want %v", got, want)
			}
			return nil
		})
	})
	t.Run("node events", func(t *testing.T) {
		eventually(t, 20*time.Second, "node events", func() error {
			for _, reason := range []string{"RegisteredNode", "NodeReady"} {
				list, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason})
				if err != nil {
					return err
				}
				if len(list.Items) == 0 {
					return fmt.Errorf("no %s event", reason)
				}
			}
			return nil
		})
	})
	t.Run("spans", func(t *testing.T) {
		var inTrace []tracetest.SpanStub
		want := []string{"SyncPod", "runtime.v1.RuntimeService/RunPodSandbox", "runtime.v1.ImageService/PullImage",
			"runtime.v1.RuntimeService/CreateContainer", "runtime.v1.RuntimeService/StartContainer", "UpdatePodStatus"}
		eventually(t, 20*time.Second, "kubelet spans in the pod's trace", func() error {
			inTrace = nil
			seen := map[string]bool{}
			for _, s := range exp.GetSpans() {
				if s.SpanContext.TraceID().String() == podTraceID {
					inTrace = append(inTrace, s)
					seen[s.Name] = true
				}
			}
			for _, name := range want {
				if !seen[name] {
					return fmt.Errorf("no %s span; have %v", name, spanNames(inTrace))
				}
			}
			return nil
		})
		syncPods := map[string]bool{}
		for _, s := range inTrace {
			if s.Name == "SyncPod" {
				syncPods[s.SpanContext.SpanID().String()] = true
				if s.Parent.SpanID().String() != podParentSpan {
					t.Errorf("SyncPod parent = %s, want the pod's span", s.Parent.SpanID())
				}
			}
		}
		for _, s := range inTrace {
			if strings.HasPrefix(s.Name, "runtime.v1.") && s.Name != "runtime.v1.RuntimeService/Version" && !syncPods[s.Parent.SpanID().String()] {
				t.Errorf("%s is not a child of a SyncPod span", s.Name)
			}
			if s.Name == "UpdatePodStatus" && s.Parent.SpanID().String() != podParentSpan {
				t.Errorf("UpdatePodStatus parent = %s, want the pod's span", s.Parent.SpanID())
			}
		}
	})
}

func spanNames(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
