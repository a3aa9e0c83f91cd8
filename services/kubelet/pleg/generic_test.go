package pleg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/kuberuntime"
)

func ctr(id string, state container.State) *container.Container {
	return &container.Container{ID: container.ContainerID{Type: "sim", ID: id}, State: state}
}

// eventStrings renders events as "Type:id", sorted, for comparison.
func eventStrings(events []*PodLifecycleEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s:%v", e.Type, e.Data))
	}
	slices.Sort(out)
	return out
}

func TestComputeEvents(t *testing.T) {
	pod := func(containers []*container.Container, sandboxes ...*container.Container) *container.Pod {
		return &container.Pod{ID: "u", Containers: containers, Sandboxes: sandboxes}
	}
	running, exited, created := container.ContainerStateRunning, container.ContainerStateExited, container.ContainerStateCreated
	tests := []struct {
		name     string
		old, cur *container.Pod
		want     []string
	}{
		{"new pod: sandbox and container started", nil,
			pod([]*container.Container{ctr("c1", running)}, ctr("s1", running)),
			[]string{"ContainerStarted:c1", "ContainerStarted:s1"}},
		{"no change: no events",
			pod([]*container.Container{ctr("c1", running)}, ctr("s1", running)),
			pod([]*container.Container{ctr("c1", running)}, ctr("s1", running)), nil},
		{"container exited: died",
			pod([]*container.Container{ctr("c1", running)}),
			pod([]*container.Container{ctr("c1", exited)}), []string{"ContainerDied:c1"}},
		{"exited container removed: removed",
			pod([]*container.Container{ctr("c1", exited)}),
			pod(nil), []string{"ContainerRemoved:c1"}},
		{"running container vanished: died and removed",
			pod([]*container.Container{ctr("c1", running)}),
			pod(nil), []string{"ContainerDied:c1", "ContainerRemoved:c1"}},
		{"restart: old died, new started",
			pod([]*container.Container{ctr("c1", running)}),
			pod([]*container.Container{ctr("c2", running), ctr("c1", exited)}),
			[]string{"ContainerDied:c1", "ContainerStarted:c2"}},
		{"created container: changed",
			pod(nil),
			pod([]*container.Container{ctr("c1", created)}), []string{"ContainerChanged:c1"}},
		{"sandbox stopped: died",
			pod(nil, ctr("s1", running)),
			pod(nil, ctr("s1", exited)), []string{"ContainerDied:s1"}},
		{"whole pod gone", pod([]*container.Container{ctr("c1", exited)}, ctr("s1", exited)), nil,
			[]string{"ContainerRemoved:c1", "ContainerRemoved:s1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eventStrings(ComputeEvents("u", tt.old, tt.cur))
			if !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
		})
	}
}

// drain returns the events buffered on g's channel.
func drain(g *GenericPLEG) []*PodLifecycleEvent {
	var out []*PodLifecycleEvent
	for {
		select {
		case e := <-g.Watch():
			out = append(out, e)
		default:
			return out
		}
	}
}

func eventTypes(events []*PodLifecycleEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, string(e.Type))
	}
	slices.Sort(out)
	return out
}

// simRuntime is the kubelet's runtime manager over a sim runtime served on a real gRPC
// socket.
func simRuntime(t *testing.T) *kuberuntime.Manager {
	m, _ := simRuntimeAndEvents(t)
	return m
}

// simRuntimeAndEvents is simRuntime and the runtime's event source on the same
// connection, as the kubelet reads them.
func simRuntimeAndEvents(t *testing.T) (*kuberuntime.Manager, EventSource) {
	t.Helper()
	rt := sim.New()
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	conn, err := kuberuntime.Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kuberuntime.NewManager(conn, kuberuntime.Options{PodLogsDirectory: t.TempDir()}), runtimeapi.NewRuntimeServiceClient(conn)
}

// syncNewPod starts pod's sandbox and containers through the runtime manager, as a pod
// worker's first sync does.
func syncNewPod(t *testing.T, m *kuberuntime.Manager, pod *v1.Pod) {
	t.Helper()
	ctx := context.Background()
	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if r := m.SyncPod(ctx, pod, status, flowcontrol.NewBackOff(time.Second, time.Second)); r.Error() != nil {
		t.Fatal(r.Error())
	}
}

func TestRelistAgainstARealRuntime(t *testing.T) {
	ctx := context.Background()
	m := simRuntime(t)
	cache := container.NewCache()
	g := NewGenericPLEG(m, cache, time.Hour, nil)

	if ok, _ := g.Healthy(); ok {
		t.Error("healthy before the first relist")
	}
	g.Relist(ctx)
	if ok, err := g.Healthy(); !ok {
		t.Errorf("unhealthy after a relist: %v", err)
	}
	if events := drain(g); len(events) != 0 {
		t.Errorf("events from an empty runtime: %v", eventStrings(events))
	}

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1",
			// The container exits by itself after 200 ms.
			Annotations: map[string]string{sim.AnnotationRunTime: "200ms", sim.AnnotationExitCode: "3"}},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	before := time.Now()
	syncNewPod(t, m, pod)

	g.Relist(ctx)
	started := drain(g)
	if got, want := eventTypes(started), []string{"ContainerStarted", "ContainerStarted"}; !slices.Equal(got, want) {
		t.Fatalf("after start: events %v, want %v (sandbox and container)", got, want)
	}
	for _, e := range started {
		if e.ID != pod.UID {
			t.Errorf("event for %s", e.ID)
		}
	}
	cached, err := cache.GetNewerThan(ctx, pod.UID, before)
	if err != nil {
		t.Fatal(err)
	}
	if c := cached.FindContainerStatusByName("c"); c == nil || c.State != container.ContainerStateRunning {
		t.Fatalf("cache: %+v", cached.ContainerStatuses)
	}

	// Relist until the container's exit is seen.
	var died []*PodLifecycleEvent
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, false, func(ctx context.Context) (bool, error) {
		g.Relist(ctx)
		died = drain(g)
		return len(died) > 0, nil
	}); err != nil {
		t.Fatal("no ContainerDied event")
	}
	if got := eventTypes(died); !slices.Equal(got, []string{"ContainerDied"}) {
		t.Errorf("after exit: events %v", got)
	}
	cached, _ = cache.Get(pod.UID)
	if c := cached.FindContainerStatusByName("c"); c == nil || c.State != container.ContainerStateExited || c.ExitCode != 3 {
		t.Errorf("cache after exit: %+v", c)
	}

	// Killing the pod stops the sandbox; removing everything removes the
	// pod from the cache.
	if err := m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), cached), nil); err != nil {
		t.Fatal(err)
	}
	g.Relist(ctx)
	if got := eventTypes(drain(g)); !slices.Equal(got, []string{"ContainerDied"}) {
		t.Errorf("after kill: events %v, want the sandbox's ContainerDied", got)
	}
	if err := m.GarbageCollect(ctx, allGone{}, true); err != nil {
		t.Fatal(err)
	}
	g.Relist(ctx)
	if got := eventTypes(drain(g)); !slices.Equal(got, []string{"ContainerRemoved", "ContainerRemoved"}) {
		t.Errorf("after removal: events %v", got)
	}
	if s, _ := cache.Get(pod.UID); len(s.SandboxStatuses) != 0 || len(s.ContainerStatuses) != 0 {
		t.Errorf("cache still has the removed pod: %+v", s)
	}
}

type allGone struct{}

func (allGone) ShouldPodContentBeRemoved(types.UID) bool { return true }

func TestHealthyReportsStaleRelist(t *testing.T) {
	g := NewGenericPLEG(nil, container.NewCache(), 0, nil)
	g.relistTime = time.Now().Add(-RelistThreshold - time.Minute)
	ok, err := g.Healthy()
	if ok || err == nil || !strings.Contains(err.Error(), "last seen active") {
		t.Errorf("Healthy = %v, %v", ok, err)
	}
}

// TestRequestRelist: with a period far beyond the test, only RequestRelist
// can make Run see a new pod, and it does.
func TestRequestRelist(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := simRuntime(t)
	cache := container.NewCache()
	g := NewGenericPLEG(m, cache, time.Hour, nil)
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		ok, _ := g.Healthy()
		return ok, nil
	}); err != nil {
		t.Fatal("Run never relisted")
	}

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	syncNewPod(t, m, pod)
	requested := time.Now()
	g.RequestRelist("")
	var events []string
	for len(events) < 2 {
		select {
		case e := <-g.Watch():
			events = append(events, string(e.Type))
		case <-time.After(30 * time.Second):
			t.Fatalf("no events after RequestRelist (got %v)", events)
		}
	}
	if !slices.Equal(events, []string{"ContainerStarted", "ContainerStarted"}) {
		t.Errorf("events %v, want the sandbox's and the container's ContainerStarted", events)
	}
	// The relist's timestamp is later than the request: a pod worker that
	// synced before asking is answered by it.
	cached, err := cache.GetNewerThan(ctx, pod.UID, requested)
	if err != nil {
		t.Fatal(err)
	}
	if c := cached.FindContainerStatusByName("c"); c == nil || c.State != container.ContainerStateRunning {
		t.Errorf("cache: %+v", cached.ContainerStatuses)
	}
}
