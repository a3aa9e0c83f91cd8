// Package runtest runs a component's Config.Run in a test as the all-in-one runs it:
// until a condition holds, then until its context ends.
package runtest

import (
	"context"
	"testing"
	"time"
)

// Timeout bounds both how long Until waits for ready and how long run may take to
// return once its context ended.
const Timeout = 10 * time.Second

// Until starts run (a Config.Run) and polls ready every 20 ms until it returns nil,
// then ends run's context and requires run to return nil, as Run must once its context
// ends. It fails t with ready's last error when ready does not hold within Timeout, and
// with run's error when run returns first.
func Until(t testing.TB, run func(context.Context) error, ready func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	for deadline := time.Now().Add(Timeout); ; {
		err := ready(ctx)
		if err == nil {
			break
		}
		select {
		case runErr := <-done:
			t.Fatalf("Run returned before it was ready: %v (ready: %v)", runErr, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after %s: %v", Timeout, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context ended = %v, want nil", err)
		}
	case <-time.After(Timeout):
		t.Fatalf("Run did not return within %s of its context ending", Timeout)
	}
}
