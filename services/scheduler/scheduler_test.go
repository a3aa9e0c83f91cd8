package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	goruntime "runtime"
	"strings"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
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
	s, err := newScheduler(Config{Client: client, SchedulerName: name}, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return s
}

var podsResource = v1.SchemeGroupVersion.WithResource("pods")

// newFakeClient returns a fake clientset whose pods/binding behaves like the
// apiserver's BindingREST: set nodeName and PodScheduled=True, or Conflict.
func newFakeClient(objects ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objects...)
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateAction)
		if create.GetSubresource() != "binding" {
			return false, nil, nil
		}
		binding := create.GetObject().(*v1.Binding)
		obj, err := client.Tracker().Get(podsResource, binding.Namespace, binding.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*v1.Pod).DeepCopy()
		if binding.UID != "" && binding.UID != pod.UID {
			return true, nil, apierrors.NewConflict(podsResource.GroupResource(), pod.Name, errors.New("uid precondition failed"))
		}
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(podsResource.GroupResource(), pod.Name, fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = binding.Target.Name
		setCondition(pod, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue})
		return true, nil, client.Tracker().Update(podsResource, pod, pod.Namespace)
	})
	return client
}

func setCondition(pod *v1.Pod, c v1.PodCondition) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == c.Type {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
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
	client := newFakeClient(cordoned, testNode("small", "1"), testNode("fits", "4"), testPod("p", "2"))
	startScheduler(t, client, "")
	if node := waitBound(t, client, "p"); node != "fits" {
		t.Fatalf("pod bound to %q, want fits", node)
	}
}

func TestLeastAllocatedSpreadsPodsAcrossNodes(t *testing.T) {
	client := newFakeClient(testNode("a", "4"), testNode("b", "4"))
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

// slowBindClient holds every Bind until release is closed. (A blocking
// fake reactor would hold the fake clientset's lock and stall all calls.)
type slowBindClient struct {
	*fake.Clientset
	release chan struct{}
}

func (c slowBindClient) CoreV1() corev1client.CoreV1Interface {
	return slowCoreV1{c.Clientset.CoreV1(), c.release}
}

type slowCoreV1 struct {
	corev1client.CoreV1Interface
	release chan struct{}
}

func (c slowCoreV1) Pods(ns string) corev1client.PodInterface {
	return slowPods{c.CoreV1Interface.Pods(ns), c.release}
}

type slowPods struct {
	corev1client.PodInterface
	release chan struct{}
}

func (p slowPods) Bind(ctx context.Context, b *v1.Binding, opts metav1.CreateOptions) error {
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.PodInterface.Bind(ctx, b, opts)
}

func TestPodsScheduledBackToBackDoNotShareTheLastSlot(t *testing.T) {
	// Bindings hang, so the second pod is scheduled before the first
	// binding lands: only the assumed pod in the cache keeps it off n1.
	client := slowBindClient{newFakeClient(testNode("n1", "1"), testPod("first", "1"), testPod("second", "1")), make(chan struct{})}
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
				return c.Message == "0/1 nodes are available: 1 Insufficient cpu.", nil
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
	client := newFakeClient(testNode("a", "1"), testNode("b", "2"), testPod("big", "3"))
	s := startScheduler(t, client, "")
	waitUnschedulable(t, client, "big", "0/2 nodes are available: 2 Insufficient cpu.")
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
	client := newFakeClient(node, testPod("p", "1"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "p", "0/1 nodes are available: 1 node(s) were unschedulable.")
	node = node.DeepCopy()
	node.Spec.Unschedulable = false
	if _, err := client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "p")
}

func TestPodWaitsWhenThereAreNoNodes(t *testing.T) {
	client := newFakeClient(testPod("p", "1"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "p", "no nodes available to schedule pods")
	client.CoreV1().Nodes().Create(context.Background(), testNode("n1", "2"), metav1.CreateOptions{})
	waitBound(t, client, "p")
}

func TestDeletedAssignedPodFreesRoomForAParkedPod(t *testing.T) {
	running := testPod("running", "2")
	running.Spec.NodeName = "n1"
	client := newFakeClient(testNode("n1", "2"), running, testPod("waiting", "2"))
	startScheduler(t, client, "")
	waitUnschedulable(t, client, "waiting", "0/1 nodes are available: 1 Insufficient cpu.")
	if err := client.CoreV1().Pods("default").Delete(context.Background(), "running", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, client, "waiting")
}

func TestBindFailureIsRetried(t *testing.T) {
	client := newFakeClient(testNode("n1", "2"), testPod("p", "1"))
	var failures atomic.Int32
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" && failures.Add(1) <= 2 {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is sulking"))
		}
		return false, nil, nil
	})
	startScheduler(t, client, "")
	waitBound(t, client, "p")
	if failures.Load() < 3 {
		t.Fatalf("bound after %d bind calls, want the 2 failures retried", failures.Load())
	}
}

func TestPodsOfOtherSchedulersAreLeftAlone(t *testing.T) {
	other := testPod("other", "1")
	other.Spec.SchedulerName = "someone-else"
	client := newFakeClient(testNode("n1", "2"), other, testPod("mine", "1"))
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

func TestSecondSchedulerServesOnlyItsName(t *testing.T) {
	custom := testPod("custom", "1")
	custom.Spec.SchedulerName = "custom-scheduler"
	client := newFakeClient(testNode("n1", "2"), custom)
	startScheduler(t, client, "")
	startScheduler(t, client, "custom-scheduler")
	waitBound(t, client, "custom")
}

func TestRunReturnsOnCancelAndCannotRunTwice(t *testing.T) {
	s, err := newScheduler(Config{Client: newFakeClient()}, fastOptions(t))
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
	client := newFakeClient(testNode("n1", "2"), testPod("p", "1"))
	var down atomic.Bool
	var refused atomic.Int32
	down.Store(true)
	unreachable := func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			refused.Add(1)
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "*", unreachable)
	client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		handled, _, err := unreachable(action)
		return handled, nil, err
	})
	startScheduler(t, client, "")
	eventually(t, "informers retrying", func() (bool, error) { return refused.Load() >= 6, nil })
	down.Store(false)
	waitBound(t, client, "p")
}

func registryWith(t *testing.T, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunLeavesNoGoroutinesBehind(t *testing.T) {
	before := goruntime.NumGoroutine()
	client := newFakeClient(testNode("n1", "2"), testPod("p", "1"))
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
		return goruntime.NumGoroutine() <= before, nil
	})
}
