// Package slicetracker remembers the EndpointSlices a controller wrote or deleted until
// its informer has seen those writes, so a sync on a stale cache does not create the
// same slices twice or miss one it just made. Both slice controllers keep one, as kube's
// share k8s.io/endpointslice/util.EndpointSliceTracker.
package slicetracker

import (
	"strconv"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Tracker records, per owner key (the Service's or Endpoints' namespace/name), the
// resourceVersion of each slice the controller wrote and the slices it deleted, until
// the informer shows them.
type Tracker struct {
	mu      sync.Mutex
	written map[string]map[string]int64 // owner key → slice name → resourceVersion
	gone    map[string]map[string]bool  // owner key → deleted slice names
}

// New is an empty Tracker.
func New() *Tracker {
	return &Tracker{written: map[string]map[string]int64{}, gone: map[string]map[string]bool{}}
}

// Wrote records that the controller created or updated s for key.
func (t *Tracker) Wrote(key string, s *discoveryv1.EndpointSlice) {
	rv, _ := strconv.ParseInt(s.ResourceVersion, 10, 64)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.written[key] == nil {
		t.written[key] = map[string]int64{}
	}
	t.written[key][s.Name] = rv
}

// Deleted records that the controller deleted key's slice name.
func (t *Tracker) Deleted(key, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone[key] == nil {
		t.gone[key] = map[string]bool{}
	}
	t.gone[key][name] = true
	delete(t.written[key], name)
}

// ObservedDelete forgets key's slice name once the informer has seen it go: whatever
// the controller wrote to it is in the past.
func (t *Tracker) ObservedDelete(key, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.written[key], name)
	delete(t.gone[key], name)
}

// Stale reports whether the informer's slices of key lag behind the controller's own
// writes; the records it finds reflected are dropped.
func (t *Tracker) Stale(key string, seen []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	byName := map[string]int64{}
	for _, s := range seen {
		byName[s.Name], _ = strconv.ParseInt(s.ResourceVersion, 10, 64)
	}
	stale := false
	for name, rv := range t.written[key] {
		if got, ok := byName[name]; ok && got >= rv {
			delete(t.written[key], name)
		} else {
			stale = true
		}
	}
	for name := range t.gone[key] {
		if _, ok := byName[name]; ok {
			stale = true
		} else {
			delete(t.gone[key], name)
		}
	}
	return stale
}
