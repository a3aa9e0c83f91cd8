package kubelet

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/container"
)

// reasonItem is why the last start of a container failed.
type reasonItem struct {
	// Err is one of container's Err* values; its text is the waiting
	// reason.
	Err     error
	Message string
}

// ReasonCache remembers, per pod and container, why the last attempt to start
// the container failed, so the pod status can show it (e.g. waiting reason
// CrashLoopBackOff) until a start succeeds. Safe for concurrent use. Mirrors
// kubelet's ReasonCache.
type ReasonCache struct {
	mu    sync.Mutex
	items map[types.UID]map[string]reasonItem
}

// NewReasonCache returns an empty ReasonCache.
func NewReasonCache() *ReasonCache {
	return &ReasonCache{items: map[types.UID]map[string]reasonItem{}}
}

// Update records the StartContainer outcomes of one SyncPod: a failure is
// remembered, a success forgets the container's earlier failure.
func (c *ReasonCache) Update(uid types.UID, result container.PodSyncResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range result.SyncResults {
		if r.Action != container.StartContainer {
			continue
		}
		if r.Error == nil {
			delete(c.items[uid], r.Target)
			continue
		}
		if c.items[uid] == nil {
			c.items[uid] = map[string]reasonItem{}
		}
		c.items[uid][r.Target] = reasonItem{Err: r.Error, Message: r.Message}
	}
}

// Get returns the last start failure of container name of pod uid.
func (c *ReasonCache) Get(uid types.UID, name string) (reasonItem, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.items[uid][name]
	return r, ok
}

// RemoveOrphans forgets the pods not in keep.
func (c *ReasonCache) RemoveOrphans(keep map[types.UID]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.items {
		if !keep[uid] {
			delete(c.items, uid)
		}
	}
}
