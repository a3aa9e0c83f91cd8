package kubelet

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// maxWaitForContainerRuntime is how long after its last good Status call the
// runtime still counts as up (kubelet: 30 s).
const maxWaitForContainerRuntime = 30 * time.Second

// healthCheck is a named check whose failure makes the node NotReady (the
// PLEG's).
type healthCheck struct {
	name string
	fn   func() (bool, error)
}

// runtimeState is what the kubelet knows of its runtime's health; it feeds
// the node's Ready condition and gates the sync loop. Mirrors kubelet's
// runtimeState.
type runtimeState struct {
	mu                  sync.Mutex
	lastBaseRuntimeSync time.Time
	runtimeError        error
	networkError        error
	healthChecks        []healthCheck
}

func (s *runtimeState) addHealthCheck(name string, fn func() (bool, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthChecks = append(s.healthChecks, healthCheck{name, fn})
}

// setRuntimeSync records a successful runtime status check at t.
func (s *runtimeState) setRuntimeSync(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastBaseRuntimeSync = t
}

func (s *runtimeState) setRuntimeState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runtimeError = err
}

func (s *runtimeState) setNetworkState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.networkError = err
}

// runtimeErrors returns why the runtime cannot run pods now, nil if it can
// (pod networking aside: host-network pods run without it).
func (s *runtimeState) runtimeErrors() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	switch {
	case s.lastBaseRuntimeSync.IsZero():
		errs = append(errs, errors.New("container runtime status check may not have completed yet"))
	case time.Since(s.lastBaseRuntimeSync) > maxWaitForContainerRuntime:
		errs = append(errs, errors.New("container runtime is down"))
	}
	for _, hc := range s.healthChecks {
		if ok, err := hc.fn(); !ok {
			errs = append(errs, fmt.Errorf("%s is not healthy: %w", hc.name, err))
		}
	}
	if s.runtimeError != nil {
		errs = append(errs, s.runtimeError)
	}
	return errors.Join(errs...)
}

// networkErrors returns why pod networking is not ready, nil if it is.
func (s *runtimeState) networkErrors() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.networkError
}
