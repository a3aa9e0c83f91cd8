package podworkers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// WorkQueue holds the pods whose workers asked to be synced again after a
// delay (a resync interval, a backoff after an error). The sync loop drains
// it every second. Safe for concurrent use. Mirrors kubelet's
// pkg/kubelet/util/queue.WorkQueue.
type WorkQueue struct {
	mu    sync.Mutex
	now   func() time.Time
	queue map[types.UID]time.Time
}

// NewWorkQueue returns an empty queue; now nil means time.Now.
func NewWorkQueue(now func() time.Time) *WorkQueue {
	if now == nil {
		now = time.Now
	}
	return &WorkQueue{now: now, queue: map[types.UID]time.Time{}}
}

// GetWork removes and returns the pods whose delay has passed.
func (q *WorkQueue) GetWork() []types.UID {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var items []types.UID
	for uid, at := range q.queue {
		if !at.After(now) {
			items = append(items, uid)
			delete(q.queue, uid)
		}
	}
	return items
}

// Enqueue asks for pod uid to be synced after delay, replacing any earlier
// request for it.
func (q *WorkQueue) Enqueue(uid types.UID, delay time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue[uid] = q.now().Add(delay)
}
