// Package queue holds the scheduling queue: the pods waiting for a node, in
// the order they will be tried, with backoff for failed attempts and a
// parking place for pods no node fits until the cluster changes. Mirrors
// kube-scheduler's pkg/scheduler/internal/queue/scheduling_queue.go.
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"skiff.dev/services/scheduler/framework"
)

// Defaults, as in kube-scheduler.
const (
	// DefaultPodInitialBackoffDuration is the backoff after the first failed attempt.
	DefaultPodInitialBackoffDuration = 1 * time.Second
	// DefaultPodMaxBackoffDuration caps the doubling backoff.
	DefaultPodMaxBackoffDuration = 10 * time.Second
	// DefaultPodMaxInUnschedulablePodsDuration is how long an unschedulable
	// pod waits for a cluster event before it is retried anyway, in case an
	// event that would have helped was missed.
	DefaultPodMaxInUnschedulablePodsDuration = 5 * time.Minute
	// DefaultBackoffQFlushPeriod is how often pods whose backoff ended move
	// from backoffQ to activeQ.
	DefaultBackoffQFlushPeriod = 1 * time.Second
	// DefaultUnschedulableFlushPeriod is how often unschedulablePods is
	// checked for pods that waited longer than the max duration.
	DefaultUnschedulableFlushPeriod = 30 * time.Second
)

// Cluster events that move unschedulable pods back to be retried; they
// label logs only, every event moves every unschedulable pod.
const (
	EventNodeAdd              = "NodeAdd"
	EventNodeUpdate           = "NodeUpdate"
	EventAssignedPodDelete    = "AssignedPodDelete"
	EventUnschedulableTimeout = "UnschedulableTimeout"
	// A PersistentVolumeClaim, PersistentVolume or StorageClass was added or updated.
	EventPersistentVolumeClaimChange = "PersistentVolumeClaimChange"
	EventPersistentVolumeChange      = "PersistentVolumeChange"
	EventStorageClassChange          = "StorageClassChange"
)

// ErrClosed is returned by Pop once the queue is closed.
var ErrClosed = errors.New("scheduling queue is closed")

// PriorityQueue is the scheduling queue. It holds every pending pod in
// exactly one of three places:
//
//   - activeQ: pods ready to be tried, a heap ordered by the QueueSort plugin;
//   - backoffQ: pods that failed recently and wait out their backoff
//     (1 s doubling per attempt up to 10 s), a heap by backoff expiry;
//   - unschedulablePods: pods no node fit, parked until a cluster event
//     (node added or changed, assigned pod deleted) might make one fit, or
//     until they have waited podMaxInUnschedulablePodsDuration.
//
// Popped pods are "in flight" until Done or AddUnschedulableIfNotPresent.
// If a cluster event happens while a pod is in flight, a failure of that pod
// sends it to backoffQ instead of parking it, so the event is not lost.
// Mirrors kube-scheduler's PriorityQueue (without queueing hints and
// nominated pods).
type PriorityQueue struct {
	clock  clock.WithTicker
	logger *slog.Logger

	podInitialBackoffDuration         time.Duration
	podMaxBackoffDuration             time.Duration
	podMaxInUnschedulablePodsDuration time.Duration
	backoffQFlushPeriod               time.Duration
	unschedulableFlushPeriod          time.Duration

	mu                sync.Mutex
	cond              *sync.Cond
	activeQ           *podHeap
	backoffQ          *podHeap
	unschedulablePods map[string]*framework.QueuedPodInfo
	// inFlightPods maps popped pods to whether they were updated since.
	inFlightPods map[types.UID]bool
	// schedulingCycle counts Pops; moveRequestCycle is its value at the last
	// cluster event. A pod popped in a cycle <= moveRequestCycle saw the
	// cluster change while in flight.
	schedulingCycle  int64
	moveRequestCycle int64
	closed           bool

	// nominator keeps the nominated pods; it has its own lock.
	nominator *Nominator
}

// Option configures a PriorityQueue.
type Option func(*PriorityQueue)

// WithClock sets the clock (tests use a fake one).
func WithClock(c clock.WithTicker) Option { return func(p *PriorityQueue) { p.clock = c } }

// WithPodNominator makes the queue keep n current as pending pods come, change and
// go (a nomination recorded in a pod's status is taken up).
func WithPodNominator(n *Nominator) Option { return func(p *PriorityQueue) { p.nominator = n } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *PriorityQueue) { p.logger = l } }

// WithPodInitialBackoffDuration sets the first backoff.
func WithPodInitialBackoffDuration(d time.Duration) Option {
	return func(p *PriorityQueue) { p.podInitialBackoffDuration = d }
}

// WithPodMaxBackoffDuration sets the backoff cap.
func WithPodMaxBackoffDuration(d time.Duration) Option {
	return func(p *PriorityQueue) { p.podMaxBackoffDuration = d }
}

// WithPodMaxInUnschedulablePodsDuration sets how long a pod stays parked
// without any cluster event.
func WithPodMaxInUnschedulablePodsDuration(d time.Duration) Option {
	return func(p *PriorityQueue) { p.podMaxInUnschedulablePodsDuration = d }
}

// WithFlushPeriods sets how often Run flushes backoffQ and unschedulablePods.
func WithFlushPeriods(backoffQ, unschedulable time.Duration) Option {
	return func(p *PriorityQueue) {
		p.backoffQFlushPeriod = backoffQ
		p.unschedulableFlushPeriod = unschedulable
	}
}

// NewPriorityQueue returns an empty queue whose activeQ is ordered by less
// (the QueueSort plugin's Less).
func NewPriorityQueue(less framework.LessFunc, opts ...Option) *PriorityQueue {
	p := &PriorityQueue{
		clock:                             clock.RealClock{},
		logger:                            slog.Default(),
		podInitialBackoffDuration:         DefaultPodInitialBackoffDuration,
		podMaxBackoffDuration:             DefaultPodMaxBackoffDuration,
		podMaxInUnschedulablePodsDuration: DefaultPodMaxInUnschedulablePodsDuration,
		backoffQFlushPeriod:               DefaultBackoffQFlushPeriod,
		unschedulableFlushPeriod:          DefaultUnschedulableFlushPeriod,
		activeQ:                           newPodHeap(less),
		unschedulablePods:                 map[string]*framework.QueuedPodInfo{},
		inFlightPods:                      map[types.UID]bool{},
	}
	for _, o := range opts {
		o(p)
	}
	p.backoffQ = newPodHeap(func(a, b *framework.QueuedPodInfo) bool {
		return p.backoffTime(a).Before(p.backoffTime(b))
	})
	p.cond = sync.NewCond(&p.mu)
	return p
}

func key(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// Run flushes backoffQ every backoffQFlushPeriod and old unschedulable pods
// every unschedulableFlushPeriod until stop is closed. It blocks.
func (p *PriorityQueue) Run(stop <-chan struct{}) {
	backoff := p.clock.NewTicker(p.backoffQFlushPeriod)
	defer backoff.Stop()
	unschedulable := p.clock.NewTicker(p.unschedulableFlushPeriod)
	defer unschedulable.Stop()
	for {
		select {
		case <-stop:
			return
		case <-backoff.C():
			p.flushBackoffQCompleted()
		case <-unschedulable.C():
			p.flushUnschedulablePodsLeftover()
		}
	}
}

// Close wakes every Pop, which then returns ErrClosed.
func (p *PriorityQueue) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cond.Broadcast()
}

// Add queues a new pending pod in activeQ, taking it out of the other
// queues if it was there.
func (p *PriorityQueue) Add(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key(pod)
	p.backoffQ.delete(k)
	delete(p.unschedulablePods, k)
	pInfo := p.newQueuedPodInfo(pod)
	p.activeQ.addOrUpdate(k, pInfo)
	if p.nominator != nil {
		p.nominator.AddNominatedPod(pInfo.PodInfo, "")
	}
	p.cond.Broadcast()
}

func (p *PriorityQueue) newQueuedPodInfo(pod *v1.Pod) *framework.QueuedPodInfo {
	return &framework.QueuedPodInfo{PodInfo: framework.NewPodInfo(pod), Timestamp: p.clock.Now()}
}

// Update replaces a pending pod's object. A parked pod whose spec or
// metadata changed (not just its status, which the scheduler itself writes)
// is retried, since the change may make it fit. An in-flight pod is marked
// updated so that a failure retries it. A pod in no queue is added.
func (p *PriorityQueue) Update(oldPod, newPod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nominator != nil {
		p.nominator.UpdateNominatedPod(oldPod, framework.NewPodInfo(newPod))
	}
	k := key(newPod)
	if pInfo, ok := p.activeQ.get(k); ok {
		p.activeQ.addOrUpdate(k, withPod(pInfo, newPod))
		return
	}
	if pInfo, ok := p.backoffQ.get(k); ok {
		p.backoffQ.addOrUpdate(k, withPod(pInfo, newPod))
		return
	}
	if pInfo, ok := p.unschedulablePods[k]; ok {
		pInfo = withPod(pInfo, newPod)
		if !isPodUpdated(oldPod, newPod) {
			p.unschedulablePods[k] = pInfo
			return
		}
		delete(p.unschedulablePods, k)
		p.requeue(k, pInfo)
		p.cond.Broadcast()
		return
	}
	if _, ok := p.inFlightPods[newPod.UID]; ok {
		if isPodUpdated(oldPod, newPod) {
			p.inFlightPods[newPod.UID] = true
		}
		return
	}
	p.activeQ.addOrUpdate(k, p.newQueuedPodInfo(newPod))
	p.cond.Broadcast()
}

func withPod(pInfo *framework.QueuedPodInfo, pod *v1.Pod) *framework.QueuedPodInfo {
	c := *pInfo
	c.PodInfo = framework.NewPodInfo(pod)
	return &c
}

// isPodUpdated reports whether anything but status, resourceVersion,
// generation, managedFields and finalizers changed. Mirrors kube-scheduler's
// isPodUpdated.
func isPodUpdated(oldPod, newPod *v1.Pod) bool {
	strip := func(pod *v1.Pod) *v1.Pod {
		p := pod.DeepCopy()
		p.ResourceVersion = ""
		p.Generation = 0
		p.Status = v1.PodStatus{}
		p.ManagedFields = nil
		p.Finalizers = nil
		return p
	}
	return !reflect.DeepEqual(strip(oldPod), strip(newPod))
}

// Delete removes the pod from whichever queue holds it, and its nomination.
func (p *PriorityQueue) Delete(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key(pod)
	p.activeQ.delete(k)
	p.backoffQ.delete(k)
	delete(p.unschedulablePods, k)
	if p.nominator != nil {
		p.nominator.DeleteNominatedPodIfExists(pod)
	}
}

// Pop removes and returns the first pod of activeQ, blocking while activeQ
// is empty. It counts a scheduling cycle and an attempt for the pod, which
// is in flight until Done or AddUnschedulableIfNotPresent. It returns
// ErrClosed once the queue is closed and ctx.Err() once ctx ends, whichever
// comes first. Mirrors kube-scheduler's PriorityQueue.Pop, which blocks
// until Close only.
func (p *PriorityQueue) Pop(ctx context.Context) (*framework.QueuedPodInfo, error) {
	// Wake the wait below when ctx ends; taking the lock first means the
	// broadcast cannot fall between Pop's ctx check and its Wait.
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.cond.Broadcast()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.activeQ.Len() == 0 && !p.closed && ctx.Err() == nil {
		p.cond.Wait()
	}
	if p.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pInfo := p.activeQ.pop()
	p.schedulingCycle++
	pInfo.Attempts++
	if pInfo.InitialAttemptTimestamp == nil {
		now := p.clock.Now()
		pInfo.InitialAttemptTimestamp = &now
	}
	p.inFlightPods[pInfo.Pod.UID] = false
	return pInfo, nil
}

// Done ends the in-flight period of a pod that will not be re-queued (it
// was bound, or skipped).
func (p *PriorityQueue) Done(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inFlightPods, uid)
}

// SchedulingCycle returns the number of Pops so far.
func (p *PriorityQueue) SchedulingCycle() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.schedulingCycle
}

// AddUnschedulableIfNotPresent re-queues a pod whose attempt in
// podSchedulingCycle failed, and ends its in-flight period. It goes to
// backoffQ if it failed with an error, if it was updated in flight, or if a
// cluster event happened since it was popped; otherwise it is parked in
// unschedulablePods. A pod already queued again (re-added by an update) is
// left where it is, with an error returned.
func (p *PriorityQueue) AddUnschedulableIfNotPresent(pInfo *framework.QueuedPodInfo, podSchedulingCycle int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	updated := p.inFlightPods[pInfo.Pod.UID]
	delete(p.inFlightPods, pInfo.Pod.UID)
	k := key(pInfo.Pod)
	if _, ok := p.activeQ.get(k); ok {
		return fmt.Errorf("pod %s is already in the active queue", k)
	}
	if _, ok := p.backoffQ.get(k); ok {
		return fmt.Errorf("pod %s is already in the backoff queue", k)
	}
	if _, ok := p.unschedulablePods[k]; ok {
		return fmt.Errorf("pod %s is already in the unschedulable pods", k)
	}
	pInfo.Timestamp = p.clock.Now()
	if updated || p.moveRequestCycle >= podSchedulingCycle || len(pInfo.UnschedulablePlugins) == 0 {
		p.backoffQ.addOrUpdate(k, pInfo)
		return nil
	}
	p.unschedulablePods[k] = pInfo
	return nil
}

// MoveAllToActiveOrBackoffQueue retries every parked pod for which
// preCheck (if not nil) returns true, after a cluster event that may make it
// fit: to activeQ, or to backoffQ if its backoff has not ended. It also
// records the event for pods in flight.
func (p *PriorityQueue) MoveAllToActiveOrBackoffQueue(event string, preCheck func(*v1.Pod) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	moved := 0
	for k, pInfo := range p.unschedulablePods {
		if preCheck != nil && !preCheck(pInfo.Pod) {
			continue
		}
		delete(p.unschedulablePods, k)
		p.requeue(k, pInfo)
		moved++
	}
	p.moveRequestCycle = p.schedulingCycle
	if moved > 0 {
		p.logger.Debug("moved unschedulable pods to be retried", "event", event, "pods", moved)
		p.cond.Broadcast()
	}
}

// requeue puts a pod that left unschedulablePods into activeQ or backoffQ.
func (p *PriorityQueue) requeue(k string, pInfo *framework.QueuedPodInfo) {
	if p.isPodBackingoff(pInfo) {
		p.backoffQ.addOrUpdate(k, pInfo)
		return
	}
	p.activeQ.addOrUpdate(k, pInfo)
}

// flushBackoffQCompleted moves the pods whose backoff ended to activeQ.
func (p *PriorityQueue) flushBackoffQCompleted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	moved := false
	for {
		pInfo := p.backoffQ.peek()
		if pInfo == nil || p.isPodBackingoff(pInfo) {
			break
		}
		p.backoffQ.pop()
		p.activeQ.addOrUpdate(key(pInfo.Pod), pInfo)
		moved = true
	}
	if moved {
		p.cond.Broadcast()
	}
}

// flushUnschedulablePodsLeftover retries the pods parked for longer than
// podMaxInUnschedulablePodsDuration.
func (p *PriorityQueue) flushUnschedulablePodsLeftover() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	moved := 0
	for k, pInfo := range p.unschedulablePods {
		if now.Sub(pInfo.Timestamp) > p.podMaxInUnschedulablePodsDuration {
			delete(p.unschedulablePods, k)
			p.requeue(k, pInfo)
			moved++
		}
	}
	if moved > 0 {
		p.moveRequestCycle = p.schedulingCycle
		p.logger.Debug("moved unschedulable pods to be retried", "event", EventUnschedulableTimeout, "pods", moved)
		p.cond.Broadcast()
	}
}

func (p *PriorityQueue) isPodBackingoff(pInfo *framework.QueuedPodInfo) bool {
	return p.backoffTime(pInfo).After(p.clock.Now())
}

func (p *PriorityQueue) backoffTime(pInfo *framework.QueuedPodInfo) time.Time {
	return pInfo.Timestamp.Add(p.calculateBackoffDuration(pInfo))
}

// calculateBackoffDuration is the initial backoff doubled per attempt after
// the first, capped at the max.
func (p *PriorityQueue) calculateBackoffDuration(pInfo *framework.QueuedPodInfo) time.Duration {
	d := p.podInitialBackoffDuration
	for i := 1; i < pInfo.Attempts; i++ {
		if d > p.podMaxBackoffDuration-d {
			return p.podMaxBackoffDuration
		}
		d += d
	}
	return min(d, p.podMaxBackoffDuration)
}

// Lengths returns how many pods each queue holds: activeQ, backoffQ,
// unschedulablePods.
func (p *PriorityQueue) Lengths() (active, backoff, unschedulable int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.activeQ.Len(), p.backoffQ.Len(), len(p.unschedulablePods)
}

// PendingPods lists every queued pod (for debugging and tests).
func (p *PriorityQueue) PendingPods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*v1.Pod
	for _, pi := range p.activeQ.list() {
		out = append(out, pi.Pod)
	}
	for _, pi := range p.backoffQ.list() {
		out = append(out, pi.Pod)
	}
	for _, pi := range p.unschedulablePods {
		out = append(out, pi.Pod)
	}
	return out
}
