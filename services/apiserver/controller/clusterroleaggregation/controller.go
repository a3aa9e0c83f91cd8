// Package clusterroleaggregation fills the rules of aggregated ClusterRoles: a
// ClusterRole with an aggregationRule gets the union of the rules of every other
// ClusterRole its selectors match, kept current as those change. That is how admin, edit
// and view grow when a ClusterRole labelled rbac.authorization.k8s.io/aggregate-to-view
// is added. Mirrors kube-controller-manager's clusterrole-aggregation controller
// (pkg/controller/clusterroleaggregation); skiff runs it in the apiserver, next to the
// RBAC authorizer whose informer it shares.
package clusterroleaggregation

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Controller keeps aggregated ClusterRoles' rules current.
type Controller struct {
	informer cache.SharedIndexInformer
	stores   registry.Stores
}

// New is the controller over the ClusterRoles' informer; it writes through the
// clusterroles Store found in stores (read when it first writes).
func New(informer cache.SharedIndexInformer, stores registry.Stores) *Controller {
	return &Controller{informer: informer, stores: stores}
}

// Run works a queue of aggregated ClusterRoles until ctx ends: any change to any
// ClusterRole may change what an aggregated one gathers, so each event queues every
// aggregated role. Errors: the informer refusing the event handler.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "clusterrole-aggregation"})
	defer queue.ShutDown()
	enqueue := func(any) {
		for _, obj := range c.informer.GetIndexer().List() {
			if r, ok := obj.(*rbacv1.ClusterRole); ok && r.AggregationRule != nil {
				queue.Add(r.Name)
			}
		}
	}
	registration, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return err
	}
	defer func() { _ = c.informer.RemoveEventHandler(registration) }()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return nil
		}
		if _, err := c.Sync(ctx, name); err != nil {
			slog.Warn("aggregating cluster role; will retry", "clusterrole", name, "err", err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// Sync sets the rules of aggregated ClusterRole name to what its selectors gather: for
// each selector in order, the rules of the matching ClusterRoles in name order, each
// rule once. It returns the role as stored when it wrote one, else nil.
func (c *Controller) Sync(ctx context.Context, name string) (runtime.Object, error) {
	obj, ok, err := c.informer.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil, err
	}
	role := obj.(*rbacv1.ClusterRole)
	if role.AggregationRule == nil {
		return nil, nil
	}
	rules := Aggregate(role, c.informer.GetIndexer().List())
	if equality.Semantic.DeepEqual(rules, role.Rules) {
		return nil, nil
	}
	store := c.stores.Store(rbacv1.Resource("clusterroles"))
	if store == nil {
		return nil, fmt.Errorf("clusterroles are not served")
	}
	updated, _, err := store.Update(ctx, "", name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		r := old.(*rbacv1.ClusterRole).DeepCopy()
		r.Rules = rules
		return r, nil
	}), &metav1.UpdateOptions{})
	return updated, err
}

// Aggregate is the rules role's aggregationRule gathers from all (ClusterRoles).
func Aggregate(role *rbacv1.ClusterRole, all []any) []rbacv1.PolicyRule {
	var candidates []*rbacv1.ClusterRole
	for _, obj := range all {
		if r, ok := obj.(*rbacv1.ClusterRole); ok && r.Name != role.Name {
			candidates = append(candidates, r)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].Name < candidates[j].Name })
	var rules []rbacv1.PolicyRule
	for i := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			continue // validation refuses such selectors; an old object may still hold one
		}
		for _, r := range candidates {
			if !selector.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				if !ruleExists(rules, rule) {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules
}

func ruleExists(rules []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if equality.Semantic.DeepEqual(r, rule) {
			return true
		}
	}
	return false
}
