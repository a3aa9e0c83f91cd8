package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// testLogWriter sends the scheduler's logs to t.Log.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// fastOptions shortens every timing so behaviour shows within milliseconds.
func fastOptions(t testing.TB) option {
	return func(o *options) {
		o.podInitialBackoff = 10 * time.Millisecond
		o.podMaxBackoff = 50 * time.Millisecond
		o.backoffQFlushPeriod = 5 * time.Millisecond
		o.unschedulableFlush = time.Hour
		o.apiTimeout = 10 * time.Second
		var w io.Writer = testLogWriter{t}
		o.logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// startScheduler runs a scheduler on client until the test ends, and checks
// that Run returns.
func startScheduler(t *testing.T, client kubernetes.Interface, name string) *Scheduler {
	t.Helper()
	return startSchedulerWith(t, Config{Client: client, SchedulerName: name})
}

// startSchedulerWith is startScheduler for a whole Config.
func startSchedulerWith(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := newScheduler(cfg, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run(t, s))
	return s
}

// run runs s until stop, which cancels Run's context and checks that Run returns nil.
func run(t *testing.T, s *Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	}
}

// newClient starts a real apiserver over a real etcd for the test and creates objects
// (nodes with their status, pods) through it.
func newClient(t *testing.T, objects ...runtime.Object) kubernetes.Interface {
	t.Helper()
	client, _ := newServer(t, objects...)
	return client
}

func newServer(t *testing.T, objects ...runtime.Object) (kubernetes.Interface, *controlplanetest.Server) {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	for _, obj := range objects {
		var err error
		switch o := obj.(type) {
		case *v1.Node:
			_, err = client.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		case *v1.Pod:
			_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected object %T", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return client, srv
}

func testNode(name, cpu string) *v1.Node {
	rl := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name)},
		Status:     v1.NodeStatus{Capacity: rl, Allocatable: rl},
	}
}

func testPod(name, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-" + name), CreationTimestamp: metav1.Now()},
		Spec: v1.PodSpec{
			SchedulerName: DefaultSchedulerName,
			Containers: []v1.Container{{Name: "c", Image: "busybox", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
			}}},
		},
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func getPod(client kubernetes.Interface, name string) (*v1.Pod, error) {
	return client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
}

func podScheduledCondition(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func waitBound(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	var node string
	eventually(t, "pod "+name+" bound", func() (bool, error) {
		pod, err := getPod(client, name)
		if err != nil {
			return false, err
		}
		node = pod.Spec.NodeName
		return node != "", nil
	})
	return node
}

func waitUnschedulable(t *testing.T, client kubernetes.Interface, name, wantMessage string) {
	t.Helper()
	eventually(t, "pod "+name+" unschedulable", func() (bool, error) {
		pod, err := getPod(client, name)
		if err != nil {
			return false, err
		}
		c := podScheduledCondition(pod)
		return c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable && c.Message == wantMessage, nil
	})
}

func TestPodIsBoundToTheNodeThatFits(t *testing.T) {
	cordoned := testNode("cordoned", "4")
	cordoned.Spec.Unschedulable = true
	client := newClient(t, cordoned, testNode("small", "1"), testNode("fits", "4"), testPod("p", "2"))
	startScheduler(t, client, "")
	if node := waitBound(t, client, "p"); node != "fits" {
		t.Fatalf("pod bound to %q, want fits", node)
	}
}

func TestLeastAllocatedSpreadsPodsAcrossNodes(t *testing.T) {
	client := newClient(t, testNode("a", "4"), testNode("b", "4"))
	startScheduler(t, client, "")
	ctx := context.Background()
	nodes := map[string]int{}
	for i := range 4 {
		name := fmt.Sprintf("p%d", i)
		if _, err := client.CoreV1().Pods("default").Create(ctx, testPod(name, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nodes[waitBound(t, client, name)]++
	}
	if nodes["a"] != 2 || nodes["b"] != 2 {
		t.Fatalf("pods per node %v, want 2 and 2", nodes)
	}
}

// slowBindClient is a real client whose Binds wait until release is closed, so a
// binding can be held in flight; each Bind first sends its pod's name on entered, when
// that is set.
type slowBindClient struct {
	kubernetes.Interface
	release chan struct{}
	entered chan string
}

func (c slowBindClient) CoreV1() corev1client.CoreV1Interface {
	return slowCoreV1{c.Interface.CoreV1(), c}
}

type slowCoreV1 struct {
	corev1client.CoreV1Interface
	c slowBindClient
}

func (c slowCoreV1) Pods(ns string) corev1client.PodInterface {
	return slowPods{c.CoreV1Interface.Pods(ns), c.c}
}

type slowPods struct {
	corev1client.PodInterface
	c slowBindClient
}

func (p slowPods) Bind(ctx context.Context, b *v1.Binding, opts metav1.CreateOptions) error {
	if p.c.entered != nil {
		p.c.entered <- b.Name
	}
	select {
	case <-p.c.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.PodInterface.Bind(ctx, b, opts)
}

// TestStoppingRecordsNoFailureForABindingCutShort: a scheduler that stops (its Lease
// lost) while a binding is in flight does not call the pod unschedulable: the binding
// may have been stored all the same, and the next leader finds the pod either way.
func TestStoppingRecordsNoFailureForABindingCutShort(t *testing.T) {
	client := slowBindClient{newClient(t, testNode("n1", "1"), testPod("p", "1")), make(chan struct{}), make(chan string, 1)}
	events := &scheduledRecorder{}
	s, err := newScheduler(Config{Client: client, Recorder: events}, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, s)
	select {
	case <-client.entered:
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("the pod's binding never started")
	}
	stop()
	if got := events.failures(); len(got) != 0 {
		t.Errorf("FailedScheduling recorded for a binding cut short: %q", got)
	}
	pod, err := getPod(client, "p")
	if err != nil {
		t.Fatal(err)
	}
	if c := podScheduledCondition(pod); c != nil {
		t.Errorf("PodScheduled condition written while stopping: %+v", c)
	}
}

func TestPodsScheduledBackToBackDoNotShareTheLastSlot(t *testing.T) {
	// Bindings hang, so the second pod is scheduled before the first
	// binding lands: only the assumed pod in the cache keeps it off n1.
	client := slowBindClient{newClient(t, testNode("n1", "1"), testPod("first", "1"), testPod("second", "1")), make(chan struct{}), nil}
	startScheduler(t, client, "")
	var parked string
	eventually(t, "one pod unschedulable", func() (bool, error) {
		for _, name := range []string{"first", "second"} {
			pod, err := getPod(client, name)
			if err != nil {
				return false, err
			}
			if c := podScheduledCondition(pod); c != nil && c.Reason == v1.PodReasonUnschedulable {
				parked = name
				return c.Message == "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.", nil
			}
		}
		return false, nil
	})
	close(client.release)
	other := map[string]string{"first": "second", "second": "first"}[parked]
	if node := waitBound(t, client, other); node != "n1" {
		t.Fatalf("%s bound to %q", other, node)
	}
	pod, _ := getPod(client, parked)
	if pod.Spec.NodeName != "" {
		t.Fatalf("both pods bound to the one slot")
	}
}

func TestUnschedulablePodIsBoundWhenABigEnoughNodeIsAdded(t *testing.T) {
	client := newClient(t, testNode("a", "1"), testNode("b", "2"), testPod("big", "3"))
	s := startScheduler(t, client, "")
	waitUnschedulable(t, client, "big", "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")
	if _, err := client.CoreV1().Nodes().Create(context.Background(), testNode("c", "4"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(t, client, "big"); node != "c" {
		t.Fatalf("pod bound to %q, want c", node)
	}
	eventually(t, "attempts counted by result", func() (bool, error) {
		scheduled := testutil.ToFloat64(s.metrics.ScheduleAttempts.WithLabelValues("scheduled", DefaultSchedulerName))
		unschedulable := testutil.ToFloat64(s.metrics.ScheduleAttempts.WithLabelValues("unschedulable", DefaultSchedulerName))
		return scheduled == 1 && unschedulable >= 1, nil
	})
	if n, err := testutil.GatherAndCount(registryWith(t, s.Metrics()), "scheduler_pending_pods"); err != nil || n != 3 {
		t.Fatalf("scheduler_pending_pods series: %d, %v; want one per queue", n, err)
	}
}

func TestUnschedulablePodIsBoundWhenANodeIsUncordoned(t *testing.T) {
	node := testNode("n1", "4")
	node.Spec.Unschedulable = true
	client := newClient(t, node, testPod("p", "1"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "p", "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
	node, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = false
	if _, err := client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "p")
}

func TestPodWaitsWhenThereAreNoNodes(t *testing.T) {
	client := newClient(t, testPod("p", "1"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "p", "no nodes available to schedule pods")
	client.CoreV1().Nodes().Create(context.Background(), testNode("n1", "2"), metav1.CreateOptions{})
	waitBound(t, client, "p")
}

func TestDeletedAssignedPodFreesRoomForAParkedPod(t *testing.T) {
	running := testPod("running", "2")
	running.Spec.NodeName = "n1"
	client := newClient(t, testNode("n1", "2"), running, testPod("waiting", "2"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "waiting", "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
	if err := client.CoreV1().Pods("default").Delete(context.Background(), "running", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "waiting")
}

// failingBindClient is a real client that injects a fault: its first failures Binds
// fail with 500 before reaching the apiserver, as when etcd is briefly unavailable, which
// cannot be caused on demand here.
type failingBindClient struct {
	kubernetes.Interface
	calls *atomic.Int32
	fail  int32
}

func (c failingBindClient) CoreV1() corev1client.CoreV1Interface {
	return failingCoreV1{c.Interface.CoreV1(), c}
}

type failingCoreV1 struct {
	corev1client.CoreV1Interface
	c failingBindClient
}

func (f failingCoreV1) Pods(ns string) corev1client.PodInterface {
	return failingPods{f.CoreV1Interface.Pods(ns), f.c}
}

type failingPods struct {
	corev1client.PodInterface
	c failingBindClient
}

func (p failingPods) Bind(ctx context.Context, b *v1.Binding, opts metav1.CreateOptions) error {
	if p.c.calls.Add(1) <= p.c.fail {
		return apierrors.NewInternalError(errors.New("injected fault: etcd is sulking"))
	}
	return p.PodInterface.Bind(ctx, b, opts)
}

func TestBindFailureIsRetried(t *testing.T) {
	calls := &atomic.Int32{}
	client := failingBindClient{newClient(t, testNode("n1", "2"), testPod("p", "1")), calls, 2}
	startScheduler(t, client, "")
	waitBound(t, client, "p")
	if calls.Load() < 3 {
		t.Fatalf("bound after %d bind calls, want the 2 failures retried", calls.Load())
	}
}

func TestPodsOfOtherSchedulersAreLeftAlone(t *testing.T) {
	other := testPod("other", "1")
	other.Spec.SchedulerName = "someone-else"
	client := newClient(t, testNode("n1", "2"), other, testPod("mine", "1"))
	s := startScheduler(t, client, "")
	waitBound(t, client, "mine")
	// Once the queue is empty, the other pod was never picked up.
	eventually(t, "empty queue", func() (bool, error) {
		a, b, u := s.queue.Lengths()
		return a+b+u == 0, nil
	})
	pod, _ := getPod(client, "other")
	if pod.Spec.NodeName != "" || podScheduledCondition(pod) != nil {
		t.Fatalf("scheduler touched another scheduler's pod: %+v", pod.Status)
	}
}

// scheduledRecorder keeps the names of the pods for which its scheduler
// recorded the Scheduled event, which it records only after its own binding
// succeeded, and the messages of the FailedScheduling events.
type scheduledRecorder struct {
	mu        sync.Mutex
	scheduled []string
	failed    []string
}

func (r *scheduledRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch reason {
	case "Scheduled":
		r.scheduled = append(r.scheduled, pod.Name)
	case "FailedScheduling":
		r.failed = append(r.failed, pod.Name+": "+message)
	}
}

func (r *scheduledRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *scheduledRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(obj, eventtype, reason, messageFmt, args...)
}

func (r *scheduledRecorder) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failed)
}

func (r *scheduledRecorder) pods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.scheduled))
}

// TestSecondSchedulerServesOnlyItsName runs the default and a named scheduler
// side by side and pins which one bound each pod: the Scheduled event is
// recorded by the scheduler whose binding succeeded, and a pod binds once.
func TestSecondSchedulerServesOnlyItsName(t *testing.T) {
	custom := testPod("custom", "1")
	custom.Spec.SchedulerName = "custom-scheduler"
	client := newClient(t, testNode("n1", "2"), custom, testPod("plain", "1"))
	defaultEvents, customEvents := &scheduledRecorder{}, &scheduledRecorder{}
	startSchedulerWith(t, Config{Client: client, Recorder: defaultEvents})
	startSchedulerWith(t, Config{Client: client, SchedulerName: "custom-scheduler", Recorder: customEvents})
	waitBound(t, client, "custom")
	waitBound(t, client, "plain")
	eventually(t, "both Scheduled events", func() (bool, error) {
		return len(defaultEvents.pods())+len(customEvents.pods()) == 2, nil
	})
	if got := customEvents.pods(); !slices.Equal(got, []string{"custom"}) {
		t.Errorf("custom-scheduler bound %q, want [custom]", got)
	}
	if got := defaultEvents.pods(); !slices.Equal(got, []string{"plain"}) {
		t.Errorf("default-scheduler bound %q, want [plain]", got)
	}
}

func TestRunReturnsOnCancelAndCannotRunTwice(t *testing.T) {
	// Nothing listens on port 1: the scheduler must not need the apiserver to stop.
	unreachable := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	s, err := newScheduler(Config{Client: unreachable}, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run on a cancelled context returned %v", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
}

func TestNewRequiresAClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a client succeeded")
	}
}

func TestSchedulerWaitsOutAnUnreachableAPIServer(t *testing.T) {
	_, srv := newServer(t, testNode("n1", "2"), testPod("p", "1"))
	var failed atomic.Int64
	cfg := rest.CopyConfig(srv.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				failed.Add(1)
			}
			return resp, err
		})
	})
	client := kubernetes.NewForConfigOrDie(cfg)
	srv.StopAPIServer()
	startScheduler(t, client, "")
	// The informers' lists fail against the stopped apiserver, then it returns.
	eventually(t, "requests failing against the stopped apiserver", func() (bool, error) {
		return failed.Load() >= 3, nil // each of the three informers' lists
	})
	if pod, err := getPod(kubernetes.NewForConfigOrDie(srv.Config), "p"); err == nil {
		t.Fatalf("apiserver answered while stopped: pod %s", pod.Name)
	}
	srv.RestartAPIServer()
	waitBound(t, client, "p")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func registryWith(t *testing.T, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunLeavesNoGoroutinesBehind(t *testing.T) {
	client := newClient(t, testNode("n1", "2"), testPod("p", "1"))
	before := goruntime.NumGoroutine() // the apiserver's and etcd's own are counted in
	s, err := newScheduler(Config{Client: client}, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitBound(t, client, "p")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "goroutines to exit", func() (bool, error) {
		// client-go shares http.DefaultTransport for plain-HTTP configs; its idle
		// keep-alive connections are the transport's, not the scheduler's.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		return goruntime.NumGoroutine() <= before, nil
	})
}

// TestUnreachableNodeGetsNoNewPods pins what the node lifecycle controller relies on: a
// node tainted node.kubernetes.io/unreachable:NoSchedule takes no new pod, even one
// carrying the default NoExecute tolerations admission adds, until the taint goes.
func TestUnreachableNodeGetsNoNewPods(t *testing.T) {
	unreachable := testNode("unreachable", "8") // the roomier node: the scorer would pick it
	unreachable.Spec.Taints = []v1.Taint{
		{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule},
		{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute},
	}
	client := newClient(t, unreachable, testNode("healthy", "2"), testPod("p", "1"))
	startScheduler(t, client, "")
	if node := waitBound(t, client, "p"); node != "healthy" {
		t.Fatalf("pod bound to %q, want healthy", node)
	}
	if err := client.CoreV1().Nodes().Delete(context.Background(), "healthy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), testPod("q", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnschedulable(t, client, "q", "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")

	// The node comes back: the controller lifts the taints and the pod lands.
	node, err := client.CoreV1().Nodes().Get(context.Background(), "unreachable", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if _, err := client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(t, client, "q"); node != "unreachable" {
		t.Fatalf("pod bound to %q after recovery, want unreachable", node)
	}
}
