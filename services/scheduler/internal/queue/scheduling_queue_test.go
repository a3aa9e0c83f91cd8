package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	testingclock "k8s.io/utils/clock/testing"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/queuesort"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newPod(name string, priority int32, created time.Time) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1.PodSpec{Priority: &priority},
	}
}

func newQueue(clock *testingclock.FakeClock) *PriorityQueue {
	return NewPriorityQueue(queuesort.PrioritySort{}.Less, WithClock(clock))
}

// popName pops and returns the popped pod's name.
func popName(t *testing.T, q *PriorityQueue) string {
	t.Helper()
	pInfo, err := q.Pop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pInfo.Pod.Name
}

// rejected marks pInfo as rejected by a filter plugin.
func rejected(pInfo *framework.QueuedPodInfo) *framework.QueuedPodInfo {
	pInfo.UnschedulablePlugins = sets.New("NodeResourcesFit")
	return pInfo
}

func where(q *PriorityQueue, pod *v1.Pod) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := key(pod)
	if _, ok := q.activeQ.get(k); ok {
		return "active"
	}
	if _, ok := q.backoffQ.get(k); ok {
		return "backoff"
	}
	if _, ok := q.unschedulablePods[k]; ok {
		return "unschedulable"
	}
	return "none"
}

func TestPopOrdersByPriorityThenAge(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	q.Add(newPod("low-old", 0, epoch.Add(-3*time.Hour)))
	q.Add(newPod("high-young", 100, epoch.Add(-1*time.Hour)))
	q.Add(newPod("low-young", 0, epoch.Add(-1*time.Hour)))
	q.Add(newPod("high-old", 100, epoch.Add(-2*time.Hour)))
	want := []string{"high-old", "high-young", "low-old", "low-young"}
	for _, w := range want {
		if got := popName(t, q); got != w {
			t.Fatalf("popped %q, want %q (order %v)", got, w, want)
		}
	}
}

func TestPopBreaksAgeTiesByQueueTime(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	q.Add(newPod("first", 0, epoch))
	clock.Step(time.Millisecond)
	q.Add(newPod("second", 0, epoch))
	if got := popName(t, q); got != "first" {
		t.Fatalf("popped %q, want first", got)
	}
}

func TestBackoffDoublesPerAttemptUpToTheMax(t *testing.T) {
	q := newQueue(testingclock.NewFakeClock(epoch))
	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{1, 1 * time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{4, 8 * time.Second},
		{5, 10 * time.Second},
		{50, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := q.calculateBackoffDuration(&framework.QueuedPodInfo{Attempts: tt.attempts}); got != tt.want {
			t.Errorf("attempts %d: backoff %v, want %v", tt.attempts, got, tt.want)
		}
	}
}

func TestFailedPodWaitsOutItsBackoff(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	pod := newPod("p", 0, epoch)
	q.Add(pod)
	for attempt, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		pInfo, _ := q.Pop(context.Background())
		// An error (no unschedulable plugins) sends the pod to backoff.
		if err := q.AddUnschedulableIfNotPresent(pInfo, q.SchedulingCycle()); err != nil {
			t.Fatal(err)
		}
		if got := where(q, pod); got != "backoff" {
			t.Fatalf("attempt %d: pod in %s, want backoff", attempt+1, got)
		}
		clock.Step(backoff - time.Millisecond)
		q.flushBackoffQCompleted()
		if got := where(q, pod); got != "backoff" {
			t.Fatalf("attempt %d: pod left backoff early, in %s", attempt+1, got)
		}
		clock.Step(time.Millisecond)
		q.flushBackoffQCompleted()
		if got := where(q, pod); got != "active" {
			t.Fatalf("attempt %d: pod in %s after %v, want active", attempt+1, got, backoff)
		}
	}
}

func TestUnschedulablePodIsRetriedOnClusterEvent(t *testing.T) {
	tests := []struct {
		name      string
		waited    time.Duration
		wantQueue string
	}{
		{name: "moved to active once its backoff is over", waited: 2 * time.Second, wantQueue: "active"},
		{name: "moved to backoff while still backing off", waited: 0, wantQueue: "backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testingclock.NewFakeClock(epoch)
			q := newQueue(clock)
			pod := newPod("p", 0, epoch)
			q.Add(pod)
			pInfo, _ := q.Pop(context.Background())
			if err := q.AddUnschedulableIfNotPresent(rejected(pInfo), q.SchedulingCycle()); err != nil {
				t.Fatal(err)
			}
			if got := where(q, pod); got != "unschedulable" {
				t.Fatalf("rejected pod in %s, want unschedulable", got)
			}
			clock.Step(tt.waited)
			q.MoveAllToActiveOrBackoffQueue(EventNodeUpdate, nil)
			if got := where(q, pod); got != tt.wantQueue {
				t.Fatalf("after node update pod in %s, want %s", got, tt.wantQueue)
			}
		})
	}
}

func TestMoveAllRespectsPreCheck(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	a, b := newPod("a", 0, epoch), newPod("b", 0, epoch)
	q.Add(a)
	q.Add(b)
	for range 2 {
		pInfo, _ := q.Pop(context.Background())
		q.AddUnschedulableIfNotPresent(rejected(pInfo), q.SchedulingCycle())
	}
	clock.Step(time.Minute)
	q.MoveAllToActiveOrBackoffQueue(EventAssignedPodDelete, func(p *v1.Pod) bool { return p.Name == "a" })
	if where(q, a) != "active" || where(q, b) != "unschedulable" {
		t.Fatalf("a in %s, b in %s; want active, unschedulable", where(q, a), where(q, b))
	}
}

func TestEventWhileInFlightSendsRejectedPodToBackoff(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	pod := newPod("p", 0, epoch)
	q.Add(pod)
	pInfo, _ := q.Pop(context.Background())
	cycle := q.SchedulingCycle()
	// A node was added while the pod was being filtered against the old
	// snapshot: parking it would miss that node until the next event.
	q.MoveAllToActiveOrBackoffQueue(EventNodeAdd, nil)
	q.AddUnschedulableIfNotPresent(rejected(pInfo), cycle)
	if got := where(q, pod); got != "backoff" {
		t.Fatalf("pod in %s, want backoff", got)
	}
}

func TestUpdateWhileInFlightSendsRejectedPodToBackoff(t *testing.T) {
	q := newQueue(testingclock.NewFakeClock(epoch))
	pod := newPod("p", 0, epoch)
	q.Add(pod)
	pInfo, _ := q.Pop(context.Background())
	updated := pod.DeepCopy()
	updated.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	q.Update(pod, updated)
	if got := where(q, pod); got != "none" {
		t.Fatalf("in-flight pod re-queued into %s by an update", got)
	}
	q.AddUnschedulableIfNotPresent(rejected(pInfo), q.SchedulingCycle())
	if got := where(q, pod); got != "backoff" {
		t.Fatalf("pod in %s, want backoff", got)
	}
}

func TestUpdateOfParkedPod(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*v1.Pod)
		wantQueue string
	}{
		{
			name: "status-only change keeps it parked",
			mutate: func(p *v1.Pod) {
				p.ResourceVersion = "2"
				p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
			},
			wantQueue: "unschedulable",
		},
		{
			name:      "spec change retries it",
			mutate:    func(p *v1.Pod) { p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}} },
			wantQueue: "active",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testingclock.NewFakeClock(epoch)
			q := newQueue(clock)
			pod := newPod("p", 0, epoch)
			q.Add(pod)
			pInfo, _ := q.Pop(context.Background())
			q.AddUnschedulableIfNotPresent(rejected(pInfo), q.SchedulingCycle())
			clock.Step(time.Minute)
			updated := pod.DeepCopy()
			tt.mutate(updated)
			q.Update(pod, updated)
			if got := where(q, pod); got != tt.wantQueue {
				t.Fatalf("pod in %s, want %s", got, tt.wantQueue)
			}
		})
	}
}

func TestUnschedulablePodsAreFlushedAfterMaxDuration(t *testing.T) {
	clock := testingclock.NewFakeClock(epoch)
	q := newQueue(clock)
	pod := newPod("p", 0, epoch)
	q.Add(pod)
	pInfo, _ := q.Pop(context.Background())
	q.AddUnschedulableIfNotPresent(rejected(pInfo), q.SchedulingCycle())
	clock.Step(DefaultPodMaxInUnschedulablePodsDuration)
	q.flushUnschedulablePodsLeftover()
	if got := where(q, pod); got != "unschedulable" {
		t.Fatalf("pod in %s before the max duration passed", got)
	}
	clock.Step(time.Second)
	q.flushUnschedulablePodsLeftover()
	if got := where(q, pod); got != "active" {
		t.Fatalf("pod in %s, want active after the max duration", got)
	}
}

func TestDeleteRemovesThePodFromEveryQueue(t *testing.T) {
	q := newQueue(testingclock.NewFakeClock(epoch))
	pod := newPod("p", 0, epoch)
	q.Add(pod)
	q.Delete(pod)
	if a, b, u := q.Lengths(); a+b+u != 0 {
		t.Fatalf("queue lengths %d %d %d after delete", a, b, u)
	}
}

func TestPopBlocksUntilAddOrClose(t *testing.T) {
	q := newQueue(testingclock.NewFakeClock(epoch))
	got := make(chan string)
	go func() {
		pInfo, err := q.Pop(context.Background())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- pInfo.Pod.Name
	}()
	q.Add(newPod("p", 0, epoch))
	if name := <-got; name != "p" {
		t.Fatalf("Pop returned %q", name)
	}
	go func() {
		_, err := q.Pop(context.Background())
		got <- err.Error()
	}()
	q.Close()
	if msg := <-got; msg != ErrClosed.Error() {
		t.Fatalf("Pop after Close returned %q", msg)
	}
}

// TestPopReturnsWhenItsContextEnds pins that a Pop blocked on an empty queue
// returns the context's error once the context ends, without Close, and that
// the queue stays usable for another Pop.
func TestPopReturnsWhenItsContextEnds(t *testing.T) {
	q := newQueue(testingclock.NewFakeClock(epoch))
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error)
	go func() {
		_, err := q.Pop(ctx)
		errs <- err
	}()
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Pop after cancel returned %v, want context.Canceled", err)
	}
	if _, err := q.Pop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pop on an ended context returned %v, want context.Canceled", err)
	}
	q.Add(newPod("p", 0, epoch))
	pInfo, err := q.Pop(context.Background())
	if err != nil || pInfo.Pod.Name != "p" {
		t.Fatalf("Pop after a cancelled Pop: %v, %v", pInfo, err)
	}
}

func TestRunFlushesBackoffQ(t *testing.T) {
	q := NewPriorityQueue(queuesort.PrioritySort{}.Less,
		WithPodInitialBackoffDuration(time.Millisecond), WithFlushPeriods(time.Millisecond, time.Hour))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); q.Run(stop) }()
	defer func() { close(stop); <-done }()
	q.Add(newPod("p", 0, epoch))
	pInfo, _ := q.Pop(context.Background())
	q.AddUnschedulableIfNotPresent(pInfo, q.SchedulingCycle())
	popped, err := q.Pop(context.Background()) // blocks until Run moved it back
	if err != nil || popped.Pod.Name != "p" || popped.Attempts != 2 {
		t.Fatalf("popped %v, %v", popped, err)
	}
}
