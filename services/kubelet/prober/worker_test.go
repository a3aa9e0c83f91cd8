package prober

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/prober/results"
)

// statuses is the status manager's cache as the workers read it.
type statuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (s *statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[uid]
	return st, ok
}

func (s *statuses) set(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[uid] = st
}

// toggle is a loopback TCP port that a tcpSocket probe finds open or closed.
type toggle struct {
	t    *testing.T
	addr string
	p    int32
	lis  net.Listener
}

func newToggle(t *testing.T) *toggle {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &toggle{t: t, addr: lis.Addr().String(), p: int32(lis.Addr().(*net.TCPAddr).Port), lis: lis}
	t.Cleanup(func() { tg.close() })
	return tg
}

func (tg *toggle) port() int32 { return tg.p }

func (tg *toggle) close() {
	if tg.lis != nil {
		tg.lis.Close()
		tg.lis = nil
	}
}

func (tg *toggle) open() {
	lis, err := net.Listen("tcp", tg.addr)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.lis = lis
}

type workerEnv struct {
	m        *Manager
	statuses *statuses
	clock    *clocktesting.FakeClock
	pod      *v1.Pod
	started  time.Time
}

func newWorkerEnv(t *testing.T, probe *v1.Probe, set func(*v1.Container, *v1.Probe)) (*workerEnv, *worker) {
	return newWorkerEnvType(t, probe, set, readiness)
}

func newWorkerEnvType(t *testing.T, probe *v1.Probe, set func(*v1.Container, *v1.Probe), pt probeType) (*workerEnv, *worker) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := &statuses{m: map[types.UID]v1.PodStatus{}}
	m := NewManager(Options{
		StatusProvider:  st,
		LivenessManager: results.NewManager(), ReadinessManager: results.NewManager(), StartupManager: results.NewManager(),
		Recorder: record.NewFakeRecorder(100), KubeletVersion: "v1.32.4", Clock: clk,
	})
	c := v1.Container{Name: "main"}
	set(&c, probe)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-w"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{c}}}
	e := &workerEnv{m: m, statuses: st, clock: clk, pod: pod, started: clk.Now()}
	return e, newWorker(m, pt, pod, c)
}

// running reports container id running since e.started, started as given.
func (e *workerEnv) running(id string, started bool) {
	e.statuses.set(e.pod.UID, v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
		Name: "main", ContainerID: "test://" + id, Started: ptr.To(started),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(e.started)}},
	}}})
}

func tcpProbe(port int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

func result(t *testing.T, w *worker) results.Result {
	t.Helper()
	r, ok := w.resultsManager.Get(w.containerID)
	if !ok {
		t.Fatal("no result cached")
	}
	return r
}

func TestWorkerReadinessStartsNotReadyAndHonoursSuccessThreshold(t *testing.T) {
	port := newToggle(t)
	port.close()
	p := tcpProbe(port.port())
	p.SuccessThreshold = 2
	e, w := newWorkerEnv(t, p, func(c *v1.Container, p *v1.Probe) { c.ReadinessProbe = p })
	ctx := context.Background()

	if !w.doProbe(ctx) {
		t.Fatal("a pod without status must keep the worker waiting")
	}
	e.running("c1", true)
	w.doProbe(ctx)
	if r := result(t, w); r != results.Failure {
		t.Fatalf("a closed port: %v, want Failure", r)
	}
	port.open()
	w.doProbe(ctx)
	if r := result(t, w); r != results.Failure {
		t.Errorf("one success of successThreshold 2: %v, want still Failure", r)
	}
	w.doProbe(ctx)
	if r := result(t, w); r != results.Success {
		t.Errorf("two successes: %v, want Success", r)
	}
	port.close()
	w.doProbe(ctx)
	if r := result(t, w); r != results.Success {
		t.Errorf("one failure of failureThreshold 3: %v, want still Success", r)
	}
}

func TestWorkerLivenessFailureHoldsUntilANewContainer(t *testing.T) {
	port := newToggle(t)
	port.close()
	e, w := newWorkerEnvType(t, tcpProbe(port.port()), func(c *v1.Container, p *v1.Probe) { c.LivenessProbe = p }, liveness)
	ctx := context.Background()
	e.running("c1", true)
	for i := range 2 {
		w.doProbe(ctx)
		if r := result(t, w); r != results.Success {
			t.Fatalf("failure %d of 3: %v, want Success (alive until proven otherwise)", i+1, r)
		}
	}
	w.doProbe(ctx)
	if r := result(t, w); r != results.Failure {
		t.Fatalf("third failure: %v, want Failure", r)
	}
	if !w.onHold {
		t.Error("a failed liveness probe must hold the worker until the container is replaced")
	}
	e.running("c2", true)
	w.doProbe(ctx)
	if w.containerID.ID != "c2" || w.onHold {
		t.Errorf("new container: id %v onHold %v", w.containerID, w.onHold)
	}
	if r := result(t, w); r != results.Success {
		t.Errorf("a new container starts alive, got %v", r)
	}
}

func TestWorkerWaitsForInitialDelayAndStartup(t *testing.T) {
	port := newToggle(t)
	port.close()
	p := tcpProbe(port.port())
	p.InitialDelaySeconds = 30
	p.FailureThreshold = 1
	e, w := newWorkerEnvType(t, p, func(c *v1.Container, p *v1.Probe) { c.LivenessProbe = p }, liveness)
	ctx := context.Background()

	e.running("c1", true)
	w.doProbe(ctx)
	if r := result(t, w); r != results.Success {
		t.Fatalf("before initialDelaySeconds the probe must not run: %v", r)
	}
	e.clock.Step(31 * time.Second)
	e.running("c1", false)
	w.doProbe(ctx)
	if r := result(t, w); r != results.Success {
		t.Fatalf("liveness must wait for the startup probe: %v", r)
	}
	e.running("c1", true)
	w.doProbe(ctx)
	if r := result(t, w); r != results.Failure {
		t.Errorf("started, past the delay, port closed: %v, want Failure", r)
	}
}

func TestWorkerStopsForTerminalPods(t *testing.T) {
	e, w := newWorkerEnv(t, tcpProbe(1), func(c *v1.Container, p *v1.Probe) { c.ReadinessProbe = p })
	e.statuses.set(e.pod.UID, v1.PodStatus{Phase: v1.PodSucceeded})
	if w.doProbe(context.Background()) {
		t.Error("a worker of a Succeeded pod must end")
	}
}

func TestUpdatePodStatus(t *testing.T) {
	e, w := newWorkerEnv(t, tcpProbe(1), func(c *v1.Container, p *v1.Probe) { c.ReadinessProbe = p })
	pod := e.pod.DeepCopy()
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "plain"},
		v1.Container{Name: "slow", StartupProbe: tcpProbe(1)})
	e.m.AddPod(pod)
	t.Cleanup(func() { e.m.RemovePod(pod) })
	_ = w

	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
		{Name: "main", ContainerID: "test://m", State: running},
		{Name: "plain", ContainerID: "test://p", State: running},
		{Name: "slow", ContainerID: "test://s", State: running},
		{Name: "waiting", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}},
	}}
	e.m.UpdatePodStatus(pod, status)
	want := map[string][2]bool{ // started, ready
		"main":    {true, false}, // readiness probe not passed yet
		"plain":   {true, true},  // no probes: ready once running
		"slow":    {false, false},
		"waiting": {false, false},
	}
	for _, s := range status.ContainerStatuses {
		if got := [2]bool{*s.Started, s.Ready}; got != want[s.Name] {
			t.Errorf("%s: started, ready = %v, want %v", s.Name, got, want[s.Name])
		}
	}

	e.m.readinessManager.Set(container.ParseContainerID("test://m"), results.Success, pod)
	e.m.startupManager.Set(container.ParseContainerID("test://s"), results.Success, pod)
	e.m.UpdatePodStatus(pod, status)
	for _, s := range status.ContainerStatuses[:3] {
		if !*s.Started || !s.Ready {
			t.Errorf("%s after its probes passed: started %v ready %v", s.Name, *s.Started, s.Ready)
		}
	}
}
