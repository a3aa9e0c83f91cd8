// Package results holds the latest result of one kind of probe (liveness,
// readiness or startup) for every probed container, and announces each change
// on a channel the kubelet's syncLoopIteration selects on. Mirrors kubelet's
// pkg/kubelet/prober/results.
package results

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/container"
)

// Result is the outcome of a probe as the kubelet acts on it.
type Result int

// The results. Unknown is a startup probe's value before it has run.
const (
	Unknown Result = iota - 1
	Success
	Failure
)

// String returns "Success", "Failure" or "UNKNOWN", as kubelet logs them.
func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	}
	return "UNKNOWN"
}

// ToPrometheusType returns the result as the prober metrics count it
// (0 success, 1 failure, -1 unknown).
func (r Result) ToPrometheusType() float64 { return float64(r) }

// Update is one changed result: of container ContainerID, of pod PodUID.
type Update struct {
	ContainerID container.ContainerID
	Result      Result
	PodUID      types.UID
}

// updatesCapacity bounds the changes waiting for the sync loop; a worker
// blocks beyond it, as kubelet's do (its channel holds 20).
const updatesCapacity = 20

// Manager stores one probe kind's results by container. Safe for concurrent
// use. Mirrors results.Manager.
type Manager struct {
	mu      sync.RWMutex
	cache   map[container.ContainerID]Result
	updates chan Update
}

// NewManager returns an empty Manager.
func NewManager() *Manager {
	return &Manager{cache: map[container.ContainerID]Result{}, updates: make(chan Update, updatesCapacity)}
}

// Get returns the cached result of id, false when there is none.
func (m *Manager) Get(id container.ContainerID) (Result, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.cache[id]
	return r, ok
}

// Set caches result for id (a container of pod) and, when it differs from
// the cached one, sends an Update; it blocks while the channel is full.
func (m *Manager) Set(id container.ContainerID, result Result, pod *v1.Pod) {
	if m.setInternal(id, result) {
		m.updates <- Update{ContainerID: id, Result: result, PodUID: pod.UID}
	}
}

func (m *Manager) setInternal(id container.ContainerID, result Result) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.cache[id]
	if ok && prev == result {
		return false
	}
	m.cache[id] = result
	return true
}

// Remove forgets id's result.
func (m *Manager) Remove(id container.ContainerID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cache, id)
}

// Updates returns the channel of changed results.
func (m *Manager) Updates() <-chan Update { return m.updates }
