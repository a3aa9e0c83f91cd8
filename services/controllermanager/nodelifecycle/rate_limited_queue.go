package nodelifecycle

import (
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// evictionRateLimiterBurst is the token bucket's burst: one node at a time.
const evictionRateLimiterBurst = 1

// TimedValue is a node waiting in a RateLimitedTimedQueue.
type TimedValue struct {
	Value string // node name
	UID   types.UID
	// AddedAt is when the node was queued; ProcessAt when it may be processed next.
	AddedAt, ProcessAt time.Time
}

// ActionFunc processes one queued node: true removes it from the queue, false retries it
// after the returned wait.
type ActionFunc func(TimedValue) (bool, time.Duration)

// RateLimitedTimedQueue is a set of nodes processed at most at its limiter's rate, in
// ProcessAt order. A node processed successfully leaves the queue but stays in the set,
// so it is not queued again until Remove. Mirrors kube's
// pkg/controller/nodelifecycle/scheduler.RateLimitedTimedQueue.
type RateLimitedTimedQueue struct {
	mu      sync.Mutex
	queue   []TimedValue    // sorted by ProcessAt
	set     map[string]bool // queued or processed, until Remove
	limiter flowcontrol.RateLimiter
	qps     float32 // the limiter's rate; a never-accepting limiter reports 1
	clock   clock.WithTicker
}

// NewRateLimitedTimedQueue is an empty queue processing qps nodes per second (0: none).
func NewRateLimitedTimedQueue(qps float32, c clock.WithTicker) *RateLimitedTimedQueue {
	return &RateLimitedTimedQueue{set: map[string]bool{}, limiter: newLimiter(qps, c), qps: qps, clock: c}
}

func newLimiter(qps float32, c clock.WithTicker) flowcontrol.RateLimiter {
	if qps <= 0 {
		return flowcontrol.NewFakeNeverRateLimiter()
	}
	return flowcontrol.NewTokenBucketRateLimiterWithClock(qps, evictionRateLimiterBurst, c)
}

// Add queues node value (uid) to be processed now; false if it is already in the set.
func (q *RateLimitedTimedQueue) Add(value string, uid types.UID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.set[value] {
		return false
	}
	now := q.clock.Now()
	q.set[value] = true
	q.insert(TimedValue{Value: value, UID: uid, AddedAt: now, ProcessAt: now})
	return true
}

// Remove takes value out of the queue and the set; false if it was not in the set.
func (q *RateLimitedTimedQueue) Remove(value string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.set[value] {
		return false
	}
	delete(q.set, value)
	q.removeFromQueue(value)
	return true
}

// Len is how many nodes wait to be processed.
func (q *RateLimitedTimedQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Try processes due nodes with fn while the limiter accepts: each attempt, due or not,
// takes a token, as kube's does.
func (q *RateLimitedTimedQueue) Try(fn ActionFunc) {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 || !q.limiter.TryAccept() {
			q.mu.Unlock()
			return
		}
		val, now := q.queue[0], q.clock.Now()
		q.mu.Unlock()
		if now.Before(val.ProcessAt) {
			return
		}
		ok, wait := fn(val)
		q.mu.Lock()
		if q.set[val.Value] { // Remove may have run meanwhile
			q.removeFromQueue(val.Value)
			if !ok {
				val.ProcessAt = now.Add(wait + 1)
				q.insert(val)
			}
		}
		q.mu.Unlock()
	}
}

// SwapLimiter switches the rate to qps nodes per second (0 stops processing). When the
// old limiter is out of tokens the new one starts empty, so a swap never bursts.
func (q *RateLimitedTimedQueue) SwapLimiter(qps float32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qps == qps {
		return
	}
	limiter := newLimiter(qps, q.clock)
	if qps > 0 && !q.limiter.TryAccept() {
		limiter.TryAccept()
	}
	q.limiter.Stop()
	q.limiter, q.qps = limiter, qps
}

// QPS is the current rate in nodes per second.
func (q *RateLimitedTimedQueue) QPS() float32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qps
}

func (q *RateLimitedTimedQueue) insert(v TimedValue) {
	i := sort.Search(len(q.queue), func(i int) bool { return q.queue[i].ProcessAt.After(v.ProcessAt) })
	q.queue = append(q.queue, TimedValue{})
	copy(q.queue[i+1:], q.queue[i:])
	q.queue[i] = v
}

func (q *RateLimitedTimedQueue) removeFromQueue(value string) {
	for i, v := range q.queue {
		if v.Value == value {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return
		}
	}
}
