// Package expectations remembers the pod creations and deletions a controller has asked
// for and not yet seen in its informer, so a sync that runs before the informer catches
// up does not act twice (create the same pods again, delete more than it meant to).
// Mirrors ControllerExpectations and UIDTrackingControllerExpectations in
// k8s.io/kubernetes/pkg/controller/controller_utils.go.
package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Timeout is how long unmet expectations hold a controller back: after it, a sync
// proceeds anyway (a watch event may have been lost). Mirrors ExpectationsTimeout.
const Timeout = 5 * time.Minute

// Expectations tracks, per controller key ("namespace/name"), how many creations are
// still to be observed and which pods (by "namespace/name") are still to be seen
// deleted. The zero value is not usable; call New.
type Expectations struct {
	mu      sync.Mutex
	records map[string]*record
	now     func() time.Time
}

type record struct {
	adds      int
	deletions sets.Set[string]
	timestamp time.Time
}

// New returns empty expectations.
func New() *Expectations {
	return &Expectations{records: map[string]*record{}, now: time.Now}
}

// Satisfied reports whether the controller key may sync: no record, every expectation
// observed, or the record older than Timeout.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.records[key]
	if !ok {
		return true
	}
	return (r.adds <= 0 && r.deletions.Len() == 0) || e.now().Sub(r.timestamp) > Timeout
}

// ExpectCreations records that the controller is about to create n pods, replacing any
// earlier record.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[key] = &record{adds: n, deletions: sets.New[string](), timestamp: e.now()}
}

// ExpectDeletions records that the controller is about to delete the given pods,
// replacing any earlier record.
func (e *Expectations) ExpectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[key] = &record{deletions: sets.New(podKeys...), timestamp: e.now()}
}

// SetExpectations records that the controller is about to create adds pods and delete
// the pods podKeys ("namespace/name") in one sync, replacing any earlier record: the
// DaemonSet controller creates and deletes in the same pass. Mirrors
// ControllerExpectations.SetExpectations.
func (e *Expectations) SetExpectations(key string, adds int, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[key] = &record{adds: adds, deletions: sets.New(podKeys...), timestamp: e.now()}
}

// CreationObserved lowers the creations expected for key by one: the informer saw a
// new pod, or a create failed and will not be seen.
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.records[key]; ok && r.adds > 0 {
		r.adds--
	}
}

// DeletionObserved marks podKey as seen deleted (or its delete as failed).
func (e *Expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.records[key]; ok {
		r.deletions.Delete(podKey)
	}
}

// Delete forgets key, when its controller object is gone.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, key)
}
