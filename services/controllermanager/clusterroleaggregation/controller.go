// Package clusterroleaggregation fills the rules of aggregated ClusterRoles: a
// ClusterRole with an aggregationRule gets the union of the rules of every other
// ClusterRole its selectors match, kept current as those change. That is how admin, edit
// and view grow when a ClusterRole labelled rbac.authorization.k8s.io/aggregate-to-view
// is added. Mirrors kube-controller-manager's clusterrole-aggregation controller
// (pkg/controller/clusterroleaggregation).
package clusterroleaggregation

import (
	"context"
	"log/slog"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	rbacinformers "k8s.io/client-go/informers/rbac/v1"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "clusterrole-aggregation-controller"

// Controller keeps aggregated ClusterRoles' rules current.
type Controller struct {
	client kubernetes.Interface
	lister rbaclisters.ClusterRoleLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	log    *slog.Logger
}

// New is the controller over the ClusterRoles' informer; it writes through client,
// whose identity must be allowed to "escalate" on clusterroles (kube's
// system:controller:clusterrole-aggregation-controller role).
func New(informer rbacinformers.ClusterRoleInformer, client kubernetes.Interface) *Controller {
	c := &Controller{
		client: client, lister: informer.Lister(), synced: informer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ClusterRoleAggregator"}),
		log: slog.Default().With("controller", Name),
	}
	// Any change to any ClusterRole may change what an aggregated one gathers, so each
	// event queues every aggregated role.
	enqueue := func(any) {
		roles, _ := c.lister.List(labels.Everything())
		for _, r := range roles {
			if r.AggregationRule != nil {
				c.queue.Add(r.Name)
			}
		}
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return c
}

// Run works the queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, c.queue, []cache.InformerSynced{c.synced}, workers, c.log, c.sync)
}

// sync sets the rules of aggregated ClusterRole name to what its selectors gather.
func (c *Controller) sync(ctx context.Context, name string) error {
	role, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || role.AggregationRule == nil {
		return err
	}
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	rules := Aggregate(role, all)
	if equality.Semantic.DeepEqual(rules, role.Rules) {
		return nil
	}
	role = role.DeepCopy()
	role.Rules = rules
	_, err = c.client.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
	return err
}

// Aggregate is the rules role's aggregationRule gathers from all: for each selector in
// order, the rules of the matching ClusterRoles (role itself excepted) in name order,
// each rule once.
func Aggregate(role *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) []rbacv1.PolicyRule {
	var candidates []*rbacv1.ClusterRole
	for _, r := range all {
		if r.Name != role.Name {
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
