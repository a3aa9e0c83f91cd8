package apiserver

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/registry/flowcontrol/ensurer"
)

// flowcontrolEnsureInterval is how often the API Priority and Fairness bootstrap
// configuration is put back after the first time (a mandatory object deleted by hand
// comes back within it).
const flowcontrolEnsureInterval = time.Minute

// runFlowcontrolBootstrap stores the API Priority and Fairness bootstrap configuration,
// retrying with backoff until etcd answers, then again every flowcontrolEnsureInterval,
// until ctx ends (kube's priority-and-fairness-config-producer post-start hook).
//
// The objects are served and kept as kube-apiserver keeps them; skiff bounds concurrent
// requests with max-in-flight (endpoints.MaxInFlight), as kube-apiserver does with
// --enable-priority-and-fairness=false, so they classify nothing.
func (s *APIServer) runFlowcontrolBootstrap(ctx context.Context) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	ensure := func(ctx context.Context) (bool, error) {
		if err := ensurer.EnsureBootstrapConfiguration(ctx, s.stores); err != nil {
			if ctx.Err() == nil {
				slog.Warn("storing the API Priority and Fairness bootstrap configuration; will retry", "err", err)
			}
			return false, nil
		}
		return true, nil
	}
	if wait.ExponentialBackoffWithContext(ctx, backoff, ensure) != nil {
		return
	}
	ticker := time.NewTicker(flowcontrolEnsureInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_, _ = ensure(ctx)
		}
	}
}
