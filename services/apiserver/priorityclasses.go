package apiserver

import (
	"context"
	"log/slog"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/registry/scheduling/priorityclass"
)

// ensureSystemPriorityClasses creates system-node-critical and system-cluster-critical
// when missing, retrying with backoff until etcd answers or ctx ends (kube's
// scheduling/bootstrap-system-priority-classes post-start hook). Their registry refuses
// to delete them, so once made they stay.
func (s *APIServer) ensureSystemPriorityClasses(ctx context.Context) {
	store := s.stores.Store(schedulingv1.Resource("priorityclasses"))
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		for _, pc := range priorityclass.SystemPriorityClasses() {
			_, err := store.Create(ctx, "", pc, &metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				if ctx.Err() == nil {
					slog.Warn("creating system priority class; will retry", "priorityClass", pc.Name, "err", err)
				}
				return false, nil
			}
		}
		return true, nil
	})
}
