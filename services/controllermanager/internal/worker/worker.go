// Package worker runs a controller's work queue the way every kube-controller-manager
// controller does (Run, worker, processNextWorkItem in pkg/controller/*): wait for the
// informers' caches, start workers that take a key, sync it, and either forget the key's
// failures, look at it again later, or requeue it with the queue's rate limit.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Requeue is the error a sync returns to look at its key again After from now without
// counting a failure (kube's queue.AddAfter), e.g. a namespace whose pods are still
// terminating or a CronJob's next schedule.
type Requeue struct{ After time.Duration }

func (r *Requeue) Error() string { return "requeue after " + r.After.String() }

// Run waits until every synced reports true (name labels the wait's log line), then runs
// workers goroutines that sync keys from queue until ctx ends; it shuts queue down and
// waits for the workers before it returns. A key whose syncKey returns nil is forgotten by
// the rate limiter; *Requeue adds it back after its delay; any other error is logged on
// log (slog.Default when nil) and the key is requeued with the queue's rate limit.
func Run(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string], synced []cache.InformerSynced, workers int, log *slog.Logger, syncKey func(ctx context.Context, key string) error) {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	if log == nil {
		log = slog.Default()
	}
	if !cache.WaitForNamedCacheSync(name, ctx.Done(), synced...) {
		return
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for processNextWorkItem(ctx, queue, log, syncKey) {
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// processNextWorkItem syncs one key; false once the queue is shut down.
func processNextWorkItem(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], log *slog.Logger, syncKey func(context.Context, string) error) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	err := syncKey(ctx, key)
	var requeue *Requeue
	switch {
	case err == nil:
		queue.Forget(key)
	case errors.As(err, &requeue):
		queue.Forget(key)
		queue.AddAfter(key, requeue.After)
	default:
		log.Warn("sync failed; will retry", "key", key, "err", err)
		queue.AddRateLimited(key)
	}
	return true
}
