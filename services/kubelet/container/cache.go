package container

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Cache holds the latest runtime PodStatus of every pod, written by the PLEG
// after each relist and read by the pod workers. A reader that just acted on
// the runtime asks for a status newer than its action (GetNewerThan) so it
// never decides twice from the same stale view. Safe for concurrent use.
// Mirrors kubecontainer.Cache.
type Cache struct {
	mu   sync.Mutex
	pods map[types.UID]*cacheData
	// timestamp is the start of the last completed relist: every entry is
	// at least this fresh, including the absent ones (no runtime state).
	timestamp   time.Time
	subscribers map[types.UID][]*subRecord
}

type cacheData struct {
	status   *PodStatus
	err      error
	modified time.Time
}

type subRecord struct {
	time time.Time
	ch   chan *cacheData
}

// NewCache returns an empty cache; GetNewerThan blocks until the first
// UpdateTime.
func NewCache() *Cache {
	return &Cache{
		pods:        map[types.UID]*cacheData{},
		subscribers: map[types.UID][]*subRecord{},
	}
}

// Get returns the cached status of pod id, or an empty PodStatus{ID: id} when
// the runtime has nothing for it; the error is the one the last inspection
// returned.
func (c *Cache) Get(id types.UID) (*PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.get(id)
	return d.status, d.err
}

// GetNewerThan blocks until the cache holds a status of pod id that is newer
// than minTime (its own entry or the whole cache refreshed after minTime) and
// returns it. It returns ctx.Err() if ctx ends first.
func (c *Cache) GetNewerThan(ctx context.Context, id types.UID, minTime time.Time) (*PodStatus, error) {
	ch := c.subscribe(id, minTime)
	select {
	case d := <-ch:
		return d.status, d.err
	case <-ctx.Done():
		// The abandoned record is dropped at the next notify (every relist).
		return nil, ctx.Err()
	}
}

// Set stores the status (or the inspection error) of pod id read at
// timestamp and wakes readers waiting for it. A status read before the one
// stored is dropped: a relist and an Evented PLEG inspection may finish in
// either order (kube's cache does the same under EventedPLEG).
func (c *Cache) Set(id types.UID, status *PodStatus, err error, timestamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.pods[id]; ok && d.modified.After(timestamp) {
		return
	}
	c.pods[id] = &cacheData{status: status, err: err, modified: timestamp}
	c.notify(id, timestamp)
}

// Delete forgets pod id; later reads return an empty status.
func (c *Cache) Delete(id types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, id)
}

// UpdateTime marks every entry as fresh as timestamp (a relist that started
// at timestamp completed) and wakes the readers this satisfies. Entries of
// pods the runtime had nothing of, stored before timestamp, are dropped: the
// cache now tells the same of them without an entry.
func (c *Cache) UpdateTime(timestamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timestamp = timestamp
	for id, d := range c.pods {
		if d.err == nil && d.status != nil && len(d.status.SandboxStatuses) == 0 &&
			len(d.status.ContainerStatuses) == 0 && d.modified.Before(timestamp) {
			delete(c.pods, id)
		}
	}
	for id := range c.subscribers {
		c.notify(id, timestamp)
	}
}

func (c *Cache) get(id types.UID) *cacheData {
	if d, ok := c.pods[id]; ok {
		return d
	}
	return &cacheData{status: &PodStatus{ID: id}}
}

// getIfNewerThan returns the entry for id if it is newer than minTime, else
// nil. Callers hold mu.
func (c *Cache) getIfNewerThan(id types.UID, minTime time.Time) *cacheData {
	d, ok := c.pods[id]
	globalNewer := !c.timestamp.IsZero() && c.timestamp.After(minTime)
	switch {
	case !ok && globalNewer:
		return &cacheData{status: &PodStatus{ID: id}}
	case ok && (d.modified.After(minTime) || globalNewer):
		return d
	}
	return nil
}

// notify answers the subscribers of id whose minimum time timestamp reaches.
// Callers hold mu.
func (c *Cache) notify(id types.UID, timestamp time.Time) {
	list, ok := c.subscribers[id]
	if !ok {
		return
	}
	var keep []*subRecord
	for _, r := range list {
		if timestamp.Before(r.time) {
			keep = append(keep, r)
			continue
		}
		r.ch <- c.get(id)
		close(r.ch)
	}
	if len(keep) == 0 {
		delete(c.subscribers, id)
	} else {
		c.subscribers[id] = keep
	}
}

func (c *Cache) subscribe(id types.UID, minTime time.Time) chan *cacheData {
	ch := make(chan *cacheData, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.getIfNewerThan(id, minTime); d != nil {
		ch <- d
		return ch
	}
	c.subscribers[id] = append(c.subscribers[id], &subRecord{time: minTime, ch: ch})
	return ch
}
