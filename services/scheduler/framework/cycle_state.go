package framework

import (
	"errors"
	"fmt"
	"sync"
)

// StateKey names one plugin's entry in the CycleState; by convention it is
// "PreFilter"+plugin name or "PreScore"+plugin name.
type StateKey string

// StateData is anything a plugin stores in the CycleState. Clone lets the
// state be copied should a cycle ever be forked (kube-scheduler does for
// preemption).
type StateData interface {
	Clone() StateData
}

// CycleState is scratch space shared by the plugins during one scheduling
// cycle of one pod: PreFilter/PreScore compute once, Filter/Score read per
// node. It is discarded after the cycle. Mirrors kube-scheduler's
// framework.CycleState.
type CycleState struct {
	mu      sync.RWMutex
	storage map[StateKey]StateData
}

// NewCycleState returns an empty CycleState.
func NewCycleState() *CycleState {
	return &CycleState{storage: map[StateKey]StateData{}}
}

// Write stores data under key, replacing any previous value.
func (c *CycleState) Write(key StateKey, data StateData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.storage[key] = data
}

// Read returns the data under key, or an error if nothing was written; a
// Filter that finds its PreFilter state missing reports an Error status.
func (c *CycleState) Read(key StateKey) (StateData, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if d, ok := c.storage[key]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("reading %q from cycle state: %w", key, ErrNotFound)
}

// ErrNotFound is returned by CycleState.Read for a key never written.
var ErrNotFound = errors.New("not found")
