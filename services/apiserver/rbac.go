package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"skiff.dev/services/apiserver/authorization/rbac"
	"skiff.dev/services/apiserver/authorization/rbac/bootstrappolicy"
	"skiff.dev/services/apiserver/registry"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
)

// rbacAuthorization is the RBAC half of authorization: the policy in memory, the
// authorizer over it, the escalation guard of the RBAC resources, and the bootstrap
// policy reconciled at start. The aggregated roles (admin, edit, view) get their rules
// from the controller-manager's clusterrole-aggregation controller, as in kube.
type rbacAuthorization struct {
	stores     registry.Stores
	policy     *rbac.Policy
	authorizer *rbac.Authorizer
	guard      *rbacregistry.Guard
	// bootstrapped is closed once the bootstrap policy is stored, aggregated and held
	// by the policy (kube's poststarthook/rbac/bootstrap-roles).
	bootstrapped chan struct{}
}

// newRBACAuthorization builds it over stores, which may still be filling: nothing reads
// them before run. The guard's Authorizer is set by the caller once the whole chain
// exists.
func newRBACAuthorization(stores registry.Stores) *rbacAuthorization {
	policy := rbac.NewPolicy(stores)
	authz := rbac.New(policy)
	return &rbacAuthorization{
		stores: stores, policy: policy, authorizer: authz,
		guard:        &rbacregistry.Guard{Resolver: authz.Resolver},
		bootstrapped: make(chan struct{}),
	}
}

// run keeps the policy current and reconciles the bootstrap policy (retrying until etcd
// answers), until ctx ends.
func (r *rbacAuthorization) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { r.policy.Run(ctx); close(done) }()
	defer func() { <-done }()
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		if err := r.bootstrap(ctx); err != nil {
			if ctx.Err() == nil {
				slog.Warn("reconciling the RBAC bootstrap policy; will retry", "err", err)
			}
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		close(r.bootstrapped)
	}
	<-ctx.Done()
}

// bootstrap reconciles the bootstrap policy and waits until the policy holds all of
// it, so the first request after start meets it.
func (r *rbacAuthorization) bootstrap(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), r.policy.HasSynced) {
		return ctx.Err()
	}
	stored, err := bootstrappolicy.Reconcile(ctx, r.stores)
	if err != nil {
		return err
	}
	return r.policy.WaitFor(ctx, stored...)
}

// errBootstrapping is /readyz's answer until the bootstrap policy is in place.
var errBootstrapping = errors.New("poststarthook/rbac/bootstrap-roles: not finished")

// ready is nil once the bootstrap policy is in place.
func (r *rbacAuthorization) ready() error {
	select {
	case <-r.bootstrapped:
		return nil
	default:
		return errBootstrapping
	}
}

// WaitForBootstrapPolicy blocks until the RBAC bootstrap policy is stored and in force
// (Serve reconciles it), or ctx ends.
func (s *APIServer) WaitForBootstrapPolicy(ctx context.Context) error {
	select {
	case <-s.rbac.bootstrapped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
