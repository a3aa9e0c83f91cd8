package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// TestRunRetriesRequeuesAndStops drives a real rate-limited queue: a failing key is
// retried until it succeeds, a *Requeue key comes back after its delay without counting
// a failure, and Run returns with the queue shut down once ctx ends.
func TestRunRetriesRequeuesAndStops(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	var mu sync.Mutex
	calls := map[string]int{}
	syncKey := func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		switch {
		case key == "flaky" && calls[key] < 3:
			return errors.New("not yet")
		case key == "later" && calls[key] == 1:
			return &Requeue{After: 20 * time.Millisecond}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, "test", queue, []cache.InformerSynced{func() bool { return true }}, 2, nil, syncKey)
	}()
	queue.Add("flaky")
	queue.Add("later")
	queue.Add("once")
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return calls["flaky"] == 3 && calls["later"] == 2 && calls["once"] == 1, nil
	})
	if err != nil {
		mu.Lock()
		t.Fatalf("calls = %v, want flaky 3, later 2, once 1", calls)
	}
	if n := queue.NumRequeues("flaky"); n != 0 {
		t.Errorf("flaky's failures not forgotten after its success: %d requeues", n)
	}
	if n := queue.NumRequeues("later"); n != 0 {
		t.Errorf("a Requeue counted as a failure: %d requeues", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if !queue.ShuttingDown() {
		t.Error("queue not shut down after Run returned")
	}
}
