package podworkers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"skiff.dev/services/kubelet/container"
)

// call is one invocation of the fake syncer.
type call struct {
	kind  string // SyncPod, SyncTerminatingPod, SyncTerminatingRuntimePod, SyncTerminatedPod
	pod   *v1.Pod
	grace *int64
	err   error // what the call returned
}

func (c call) String() string {
	s := c.kind
	if c.pod != nil {
		s += " " + c.pod.ResourceVersion
	}
	return s
}

// fakeSyncer records calls; SyncPod can be held (until release is closed or
// its context ends) and can report the pod terminal or fail.
type fakeSyncer struct {
	calls chan call

	mu         sync.Mutex
	release    chan struct{}
	isTerminal bool
	syncErr    error
}

func newFakeSyncer() *fakeSyncer {
	f := &fakeSyncer{calls: make(chan call, 100), release: make(chan struct{})}
	close(f.release)
	return f
}

// hold makes SyncPod wait until the returned func is called.
func (f *fakeSyncer) hold() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.release = ch
	return sync.OnceFunc(func() { close(ch) })
}

func (f *fakeSyncer) SyncPod(ctx context.Context, _ SyncPodType, pod *v1.Pod, _ *container.PodStatus) (bool, error) {
	f.mu.Lock()
	release, terminal, err := f.release, f.isTerminal, f.syncErr
	f.mu.Unlock()
	select {
	case <-release:
	case <-ctx.Done():
		err = ctx.Err()
	}
	f.calls <- call{kind: "SyncPod", pod: pod, err: err}
	return terminal && err == nil, err
}

func (f *fakeSyncer) SyncTerminatingPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus, grace *int64) error {
	f.calls <- call{kind: "SyncTerminatingPod", pod: pod, grace: grace}
	return nil
}

func (f *fakeSyncer) SyncTerminatingRuntimePod(context.Context, *container.Pod) error {
	f.calls <- call{kind: "SyncTerminatingRuntimePod"}
	return nil
}

func (f *fakeSyncer) SyncTerminatedPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus) error {
	f.calls <- call{kind: "SyncTerminatedPod", pod: pod}
	return nil
}

// freshCache always has a (empty) status newer than asked.
type freshCache struct{}

func (freshCache) GetNewerThan(_ context.Context, uid types.UID, _ time.Time) (*container.PodStatus, error) {
	return &container.PodStatus{ID: uid}, nil
}

func newTestWorkers(t *testing.T, f *fakeSyncer, backOff time.Duration) (*PodWorkers, *WorkQueue) {
	q := NewWorkQueue(nil)
	w := New(f, freshCache{}, nil, q, time.Hour, backOff, nil)
	t.Cleanup(w.Stop)
	return w, q
}

func testPod(version string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", ResourceVersion: version},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30)},
	}
}

func deleted(pod *v1.Pod, grace int64) *v1.Pod {
	p := pod.DeepCopy()
	p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	p.DeletionGracePeriodSeconds = &grace
	return p
}

// next waits for the next call.
func next(t *testing.T, f *fakeSyncer) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a sync call")
		return call{}
	}
}

// expectCalls waits for calls of the given kinds, in order.
func expectCalls(t *testing.T, f *fakeSyncer, kinds ...string) []call {
	t.Helper()
	var got []call
	for _, k := range kinds {
		c := next(t, f)
		got = append(got, c)
		if c.kind != k {
			t.Fatalf("calls %v, want %v", got, kinds)
		}
	}
	return got
}

// noMoreCalls stops the workers and checks that no call was left.
func noMoreCalls(t *testing.T, w *PodWorkers, f *fakeSyncer) {
	t.Helper()
	w.Stop()
	close(f.calls)
	var rest []string
	for c := range f.calls {
		rest = append(rest, c.String())
	}
	if len(rest) > 0 {
		t.Errorf("unexpected calls: %v", rest)
	}
}

func TestUpdatesArrivingDuringASyncAreCoalesced(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	release := f.hold()
	defer release()

	w.UpdatePod(UpdatePodOptions{Pod: testPod("1"), UpdateType: SyncPodCreate})
	// Wait until the first sync has taken its update.
	waitFor(t, func() bool {
		w.podLock.Lock()
		defer w.podLock.Unlock()
		s := w.podSyncStatuses["uid-1"]
		return s != nil && s.pendingUpdate == nil && s.activeUpdate != nil
	})
	for _, v := range []string{"2", "3", "4"} {
		w.UpdatePod(UpdatePodOptions{Pod: testPod(v), UpdateType: SyncPodUpdate})
	}
	release()

	calls := expectCalls(t, f, "SyncPod", "SyncPod")
	if calls[0].pod.ResourceVersion != "1" || calls[1].pod.ResourceVersion != "4" {
		t.Errorf("synced versions %v, want [1 4]: the three updates coalesce into the latest", calls)
	}
	waitFor(t, func() bool {
		w.podLock.Lock()
		defer w.podLock.Unlock()
		return !w.podSyncStatuses["uid-1"].working
	})
	noMoreCalls(t, w, f)
}

func TestDeletedPodTerminatesThenFinishes(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	pod := testPod("1")

	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	expectCalls(t, f, "SyncPod")
	if !w.CouldHaveRunningContainers(pod.UID) {
		t.Error("a syncing pod could have running containers")
	}

	w.UpdatePod(UpdatePodOptions{Pod: deleted(pod, 5), UpdateType: SyncPodUpdate})
	calls := expectCalls(t, f, "SyncTerminatingPod", "SyncTerminatedPod")
	if g := calls[0].grace; g == nil || *g != 5 {
		t.Errorf("grace period = %v, want the deletion's 5 s", g)
	}
	waitFor(t, func() bool { return w.IsPodKnownTerminated(pod.UID) })
	if w.CouldHaveRunningContainers(pod.UID) {
		t.Error("a terminated pod could still have running containers")
	}
	if !w.ShouldPodContentBeRemoved(pod.UID) {
		t.Error("a deleted, terminated pod's content should be removable")
	}

	// A finished UID takes no more work.
	w.UpdatePod(UpdatePodOptions{Pod: deleted(pod, 5), UpdateType: SyncPodSync})
	noMoreCalls(t, w, f)
}

func TestDeletionCancelsTheSyncInProgress(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	release := f.hold()
	defer release()
	pod := testPod("1")

	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	waitFor(t, func() bool {
		w.podLock.Lock()
		defer w.podLock.Unlock()
		return w.podSyncStatuses[pod.UID].IsStarted()
	})
	w.UpdatePod(UpdatePodOptions{Pod: deleted(pod, 3), UpdateType: SyncPodUpdate})

	calls := expectCalls(t, f, "SyncPod", "SyncTerminatingPod", "SyncTerminatedPod")
	if !errors.Is(calls[0].err, context.Canceled) {
		t.Errorf("held SyncPod returned %v, want context.Canceled", calls[0].err)
	}
}

func TestGracePeriodOnlyShrinks(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	pod := testPod("1")
	// Hold the pod in SyncPod so both deletions land before termination.
	release := f.hold()
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: deleted(pod, 10), UpdateType: SyncPodUpdate})
	w.UpdatePod(UpdatePodOptions{Pod: deleted(pod, 20), UpdateType: SyncPodUpdate})
	release()
	var terminating call
	for {
		c := next(t, f)
		if c.kind == "SyncTerminatingPod" {
			terminating = c
			break
		}
	}
	if g := terminating.grace; g == nil || *g != 10 {
		t.Errorf("grace period = %v, want 10 (a later, longer one is ignored)", ptr.Deref(g, -1))
	}
}

func TestTerminalPodIsTerminatedButNotRemoved(t *testing.T) {
	f := newFakeSyncer()
	f.isTerminal = true
	w, _ := newTestWorkers(t, f, time.Hour)
	pod := testPod("1")

	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	calls := expectCalls(t, f, "SyncPod", "SyncTerminatingPod", "SyncTerminatedPod")
	if g := calls[1].grace; g != nil {
		t.Errorf("grace period = %d, want none (the pod's own applies)", *g)
	}
	waitFor(t, func() bool { return w.IsPodKnownTerminated(pod.UID) })
	if w.ShouldPodContentBeRemoved(pod.UID) {
		t.Error("a finished pod that was not deleted keeps its content (logs, last containers)")
	}
	if !w.ShouldPodRuntimeBeRemoved(pod.UID) {
		t.Error("a terminated pod's runtime may be removed")
	}
}

func TestSyncKnownPodsTerminatesOrphansAndForgetsThemWhenFinished(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	pod := testPod("1")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	expectCalls(t, f, "SyncPod")
	waitFor(t, func() bool {
		w.podLock.Lock()
		defer w.podLock.Unlock()
		return !w.podSyncStatuses[pod.UID].working
	})

	if got := w.SyncKnownPods([]*v1.Pod{pod}); got[pod.UID].State != SyncPod || got[pod.UID].Orphan {
		t.Errorf("known pod: %+v", got[pod.UID])
	}
	// The pod is no longer desired: the worker terminates it.
	if got := w.SyncKnownPods(nil); !got[pod.UID].Orphan || got[pod.UID].State != TerminatingPod {
		t.Errorf("orphan: %+v", got[pod.UID])
	}
	expectCalls(t, f, "SyncTerminatingPod", "SyncTerminatedPod")
	waitFor(t, func() bool {
		w.podLock.Lock()
		defer w.podLock.Unlock()
		return w.podSyncStatuses[pod.UID].IsFinished()
	})
	if got := w.SyncKnownPods(nil); len(got) != 0 {
		t.Errorf("finished orphan still tracked: %+v", got)
	}
	if !w.ShouldPodContentBeRemoved(pod.UID) {
		t.Error("an unknown pod's content should be removable after SyncKnownPods")
	}
}

func TestRuntimeOnlyPodIsKilledAndForgotten(t *testing.T) {
	f := newFakeSyncer()
	w, _ := newTestWorkers(t, f, time.Hour)
	rp := &container.Pod{ID: "orphan", Name: "o", Namespace: "ns"}

	w.UpdatePod(UpdatePodOptions{RunningPod: rp, UpdateType: SyncPodSync})
	w.UpdatePod(UpdatePodOptions{RunningPod: rp, UpdateType: SyncPodKill,
		KillPodOptions: &KillPodOptions{PodTerminationGracePeriodSecondsOverride: ptr.To[int64](1)}})
	expectCalls(t, f, "SyncTerminatingRuntimePod")
	waitFor(t, func() bool { return len(w.SyncKnownPods(nil)) == 0 })
	noMoreCalls(t, w, f)
}

func TestFailedSyncIsRequeuedAfterTheBackOffPeriod(t *testing.T) {
	f := newFakeSyncer()
	f.syncErr = fmt.Errorf("runtime said no")
	w, q := newTestWorkers(t, f, time.Millisecond)
	w.UpdatePod(UpdatePodOptions{Pod: testPod("1"), UpdateType: SyncPodCreate})
	expectCalls(t, f, "SyncPod")
	waitFor(t, func() bool { return slices.Contains(q.GetWork(), types.UID("uid-1")) })
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatal("condition not met")
	}
}

func TestWorkQueueReturnsOnlyDueItems(t *testing.T) {
	now := time.Unix(1000, 0)
	q := NewWorkQueue(func() time.Time { return now })
	q.Enqueue("a", 0)
	q.Enqueue("b", time.Minute)
	if got := q.GetWork(); !slices.Equal(got, []types.UID{"a"}) {
		t.Errorf("GetWork = %v, want [a]", got)
	}
	now = now.Add(time.Minute)
	if got := q.GetWork(); !slices.Equal(got, []types.UID{"b"}) {
		t.Errorf("GetWork = %v, want [b]", got)
	}
	if got := q.GetWork(); len(got) != 0 {
		t.Errorf("GetWork = %v, want nothing", got)
	}
}

// timedRelister records when each relist was requested.
type timedRelister struct {
	mu       sync.Mutex
	requests []time.Time
}

func (r *timedRelister) RequestRelist(types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, time.Now())
}

// minTimeCache records the minimum time each GetNewerThan asked for.
type minTimeCache struct {
	mu       sync.Mutex
	minTimes []time.Time
}

func (c *minTimeCache) GetNewerThan(_ context.Context, uid types.UID, minTime time.Time) (*container.PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.minTimes = append(c.minTimes, minTime)
	return &container.PodStatus{ID: uid}, nil
}

// TestRelistIsRequestedAfterEachSync: a worker asks the PLEG for a relist when
// a sync ends, and only after it has noted the sync's end, so the relist that
// answers is newer than what the next sync waits for.
func TestRelistIsRequestedAfterEachSync(t *testing.T) {
	f := newFakeSyncer()
	cache := &minTimeCache{}
	relister := &timedRelister{}
	w := New(f, cache, relister, NewWorkQueue(nil), time.Hour, time.Hour, nil)
	t.Cleanup(w.Stop)

	w.UpdatePod(UpdatePodOptions{Pod: testPod("1"), UpdateType: SyncPodCreate})
	expectCalls(t, f, "SyncPod")
	waitFor(t, func() bool {
		relister.mu.Lock()
		defer relister.mu.Unlock()
		return len(relister.requests) == 1
	})
	w.UpdatePod(UpdatePodOptions{Pod: testPod("2"), UpdateType: SyncPodSync})
	expectCalls(t, f, "SyncPod")
	waitFor(t, func() bool {
		relister.mu.Lock()
		defer relister.mu.Unlock()
		return len(relister.requests) == 2
	})

	cache.mu.Lock()
	defer cache.mu.Unlock()
	relister.mu.Lock()
	defer relister.mu.Unlock()
	if len(cache.minTimes) != 2 {
		t.Fatalf("%d cache reads, want 2", len(cache.minTimes))
	}
	if second, requested := cache.minTimes[1], relister.requests[0]; second.After(requested) {
		t.Errorf("the second sync waits for a status newer than %v, but the relist was requested at %v: it cannot answer", second, requested)
	}
}
