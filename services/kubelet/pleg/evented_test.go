package pleg

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/kuberuntime"
)

// countingRuntime counts the relists (GetPods) made through it.
type countingRuntime struct {
	Runtime
	relists atomic.Int32
}

func (r *countingRuntime) GetPods(ctx context.Context, all bool) ([]*container.Pod, error) {
	r.relists.Add(1)
	return r.Runtime.GetPods(ctx, all)
}

// eventedSim is an Evented PLEG over a sim runtime served on a real gRPC socket, its
// events read through the same connection as the kubelet reads them. It returns the
// runtime manager, the PLEG, its cache and its relist counter; the PLEG runs until the
// test ends.
func eventedSim(t *testing.T) (*kuberuntime.Manager, *EventedPLEG, *container.Cache, *countingRuntime) {
	t.Helper()
	m, events := simRuntimeAndEvents(t)
	counted := &countingRuntime{Runtime: m}
	cache := container.NewCache()
	e := NewEventedPLEG(NewGenericPLEG(counted, cache, 0, nil), events, nil)
	runUntilCleanup(t, e.Run)
	return m, e, cache, counted
}

func runUntilCleanup(t *testing.T, run func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// nextEvents receives n events from e, failing the test after 10 s.
func nextEvents(t *testing.T, e *EventedPLEG, n int) []*PodLifecycleEvent {
	t.Helper()
	var out []*PodLifecycleEvent
	for len(out) < n {
		select {
		case ev := <-e.Watch():
			out = append(out, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d events within 10s: %v", len(out), n, eventStrings(out))
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestEventedPLEGFollowsTheRuntimesEvents: once subscribed, a pod's start, its
// container's own exit, the pod's kill and its removal reach the sync loop and the
// cache with no relist at all.
func TestEventedPLEGFollowsTheRuntimesEvents(t *testing.T) {
	ctx := context.Background()
	m, e, cache, counted := eventedSim(t)
	// Run's first relist and the one after the subscription; then none for 5 min.
	waitFor(t, "the relist after subscribing", func() bool { return counted.relists.Load() == 2 })
	if ok, err := e.Healthy(); !ok || !e.InUse() {
		t.Fatalf("Healthy = %v, %v, InUse = %v; want healthy and in use", ok, err, e.InUse())
	}

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1",
			Annotations: map[string]string{sim.AnnotationRunTime: "300ms", sim.AnnotationExitCode: "3"}},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	syncNewPod(t, m, pod)
	if got := eventTypes(nextEvents(t, e, 2)); !slices.Equal(got, []string{"ContainerStarted", "ContainerStarted"}) {
		t.Fatalf("after start: events %v, want the sandbox's and the container's ContainerStarted", got)
	}
	if got := eventTypes(nextEvents(t, e, 1)); !slices.Equal(got, []string{"ContainerDied"}) {
		t.Fatalf("after the container's run time: events %v, want ContainerDied", got)
	}
	cached, _ := cache.Get(pod.UID)
	if c := cached.FindContainerStatusByName("c"); c == nil || c.State != container.ContainerStateExited || c.ExitCode != 3 {
		t.Fatalf("cache after the exit: %+v, want the container exited with code 3", c)
	}

	if err := m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), cached), nil); err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(nextEvents(t, e, 1)); !slices.Equal(got, []string{"ContainerDied"}) {
		t.Fatalf("after kill: events %v, want the sandbox's ContainerDied", got)
	}
	if err := m.GarbageCollect(ctx, allGone{}, true); err != nil {
		t.Fatal(err)
	}
	removed := nextEvents(t, e, 4)
	if got := eventTypes(removed); !slices.Equal(got, []string{"ContainerDied", "ContainerDied", "ContainerRemoved", "ContainerRemoved"}) {
		t.Fatalf("after removal: events %v, want ContainerDied and ContainerRemoved of the container and the sandbox", eventStrings(removed))
	}
	waitFor(t, "the removed pod's empty status", func() bool {
		s, _ := cache.Get(pod.UID)
		return len(s.SandboxStatuses) == 0 && len(s.ContainerStatuses) == 0
	})
	if n := counted.relists.Load(); n != 2 {
		t.Errorf("%d relists; want only the 2 before the pod", n)
	}
}

// TestEventedPLEGRequestRelistInspectsThePod: a pod worker's request after its sync
// gets it a status newer than the request, without a relist.
func TestEventedPLEGRequestRelistInspectsThePod(t *testing.T) {
	ctx := context.Background()
	m, e, cache, counted := eventedSim(t)
	waitFor(t, "the relist after subscribing", func() bool { return counted.relists.Load() == 2 })
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	syncNewPod(t, m, pod)
	// The events' inspections read the pod before this moment; only the
	// request's can answer.
	requested := time.Now()
	e.RequestRelist(pod.UID)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cached, err := cache.GetNewerThan(waitCtx, pod.UID, requested)
	if err != nil {
		t.Fatalf("no status newer than the request: %v", err)
	}
	if c := cached.FindContainerStatusByName("c"); c == nil || c.State != container.ContainerStateRunning {
		t.Errorf("status after the request: %+v, want c running", cached.ContainerStatuses)
	}
	if n := counted.relists.Load(); n != 2 {
		t.Errorf("%d relists; want only the 2 before the pod", n)
	}
}

// TestEventedPLEGFallsBackWithoutEvents: a runtime with no event stream (the generated
// server's Unimplemented, as containerd before 1.7 answers) leaves the PLEG relisting
// every second, which sees a new pod with no request at all.
func TestEventedPLEGFallsBackWithoutEvents(t *testing.T) {
	m := simRuntime(t)
	cache := container.NewCache()
	noEvents := runtimeapi.NewRuntimeServiceClient(cri.NewInProcessConn(&runtimeapi.UnimplementedRuntimeServiceServer{}, nil))
	e := NewEventedPLEG(NewGenericPLEG(m, cache, 0, nil), noEvents, nil)
	runUntilCleanup(t, e.Run)
	waitFor(t, "the fall back", func() bool { return !e.InUse() })

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	syncNewPod(t, m, pod)
	if got := eventTypes(nextEvents(t, e, 2)); !slices.Equal(got, []string{"ContainerStarted", "ContainerStarted"}) {
		t.Fatalf("events %v, want the sandbox's and the container's ContainerStarted from a relist", got)
	}
	e.generic.timeMu.Lock()
	threshold := e.generic.relistThreshold
	e.generic.timeMu.Unlock()
	if threshold != RelistThreshold {
		t.Errorf("health threshold after the fall back = %v, want %v", threshold, RelistThreshold)
	}
}

// flakySource fails its first subscriptions with Unavailable, then opens the real
// stream: a test double of a runtime that restarts.
type flakySource struct {
	EventSource
	failures atomic.Int32
}

func (f *flakySource) GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (runtimeapi.RuntimeService_GetContainerEventsClient, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "the runtime is restarting")
	}
	return f.EventSource.GetContainerEvents(ctx, in, opts...)
}

// TestEventedPLEGRelistsAfterAStreamFailure: a failed subscription costs a relist and
// another try, and events flow once the stream opens; too many failures in a row
// make the PLEG fall back to relisting.
func TestEventedPLEGRelistsAfterAStreamFailure(t *testing.T) {
	rt := sim.NewHollow()
	t.Cleanup(rt.Close)
	conn := cri.NewInProcessConn(rt, rt)
	m := kuberuntime.NewManager(conn, kuberuntime.Options{PodLogsDirectory: t.TempDir()})
	counted := &countingRuntime{Runtime: m}
	source := &flakySource{EventSource: runtimeapi.NewRuntimeServiceClient(conn)}
	source.failures.Store(2)
	e := NewEventedPLEG(NewGenericPLEG(counted, container.NewCache(), 0, nil), source, nil)
	runUntilCleanup(t, e.Run)
	// Run's first relist, one per failure, one after the subscription.
	waitFor(t, "the relists of two failures and a subscription", func() bool { return counted.relists.Load() >= 4 })
	if !e.InUse() {
		t.Fatal("fell back after 2 failures; want events in use")
	}

	failing := &flakySource{EventSource: runtimeapi.NewRuntimeServiceClient(conn)}
	failing.failures.Store(MaxStreamRetries)
	e2 := NewEventedPLEG(NewGenericPLEG(m, container.NewCache(), 0, nil), failing, nil)
	runUntilCleanup(t, e2.Run)
	waitFor(t, "the fall back after MaxStreamRetries failures", func() bool { return !e2.InUse() })
}
