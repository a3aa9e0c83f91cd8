package tainteviction

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// timedWorker is one scheduled pod deletion.
type timedWorker struct {
	createdAt time.Time // when the pod's eviction was first decided
	fireAt    time.Time
	timer     clock.Timer
}

// TimedWorkerQueue schedules one function call per pod at a time of the clock and
// cancels it on request. Mirrors kube's tainteviction.TimedWorkerQueue.
type TimedWorkerQueue struct {
	mu      sync.Mutex
	workers map[types.NamespacedName]*timedWorker
	fire    func(types.NamespacedName)
	clock   clock.WithTickerAndDelayedExecution
}

// NewTimedWorkerQueue calls fire for each pod when its time comes.
func NewTimedWorkerQueue(fire func(types.NamespacedName), c clock.WithTickerAndDelayedExecution) *TimedWorkerQueue {
	return &TimedWorkerQueue{workers: map[types.NamespacedName]*timedWorker{}, fire: fire, clock: c}
}

// AddWork schedules pod's deletion at fireAt, remembering createdAt; a pod already
// scheduled keeps its schedule.
func (q *TimedWorkerQueue) AddWork(pod types.NamespacedName, createdAt, fireAt time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.workers[pod]; ok {
		return
	}
	delay := fireAt.Sub(q.clock.Now())
	if delay <= 0 {
		// Due now: fire without a timer (a fake clock fires timers only when stepped).
		go q.fire(pod)
		return
	}
	w := &timedWorker{createdAt: createdAt, fireAt: fireAt}
	w.timer = q.clock.AfterFunc(delay, func() {
		q.mu.Lock()
		current := q.workers[pod] == w
		if current {
			delete(q.workers, pod)
		}
		q.mu.Unlock()
		if current {
			// In a goroutine of its own: a fake clock runs this under its lock, and
			// the work queue fire feeds reads the clock (its metrics).
			go q.fire(pod)
		}
	})
	q.workers[pod] = w
}

// CancelWork unschedules pod; false if it was not scheduled.
func (q *TimedWorkerQueue) CancelWork(pod types.NamespacedName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.workers[pod]
	if ok {
		w.timer.Stop()
		delete(q.workers, pod)
	}
	return ok
}

// Scheduled returns pod's scheduled deletion: when it was decided and when it fires.
func (q *TimedWorkerQueue) Scheduled(pod types.NamespacedName) (createdAt, fireAt time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.workers[pod]
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	return w.createdAt, w.fireAt, true
}
