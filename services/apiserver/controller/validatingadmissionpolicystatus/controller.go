// Package validatingadmissionpolicystatus writes the status of each
// ValidatingAdmissionPolicy whose spec changed: status.typeChecking, the warnings of
// type-checking its expressions against the schemas of the kinds it matches (see
// policy.TypeChecker), and status.observedGeneration, the generation checked. A client
// waiting for typeChecking to be set knows the policy was read. Mirrors kube's
// validatingadmissionpolicy-status controller
// (k8s.io/kubernetes/pkg/controller/validatingadmissionpolicystatus), which
// kube-controller-manager runs; skiff runs it inside the apiserver, where the schemas
// are, watching the policies through the registry and writing through the status
// subresource's strategy (no admission, as for kube's in-process controllers).
package validatingadmissionpolicystatus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicy"
	"skiff.dev/services/apiserver/registry/rest"
)

// ControllerName is kube's name of the controller, and the field manager of its writes.
const ControllerName = "validatingadmissionpolicy-status"

// Config is what the controller needs.
type Config struct {
	// Stores finds the validatingadmissionpolicies Store: the controller lists and
	// watches it in process and writes status through its status strategy.
	Stores registry.Stores
	// Check type-checks a policy (policy.TypeChecker.Check).
	Check func(*admissionregistrationv1.ValidatingAdmissionPolicy) []admissionregistrationv1.ExpressionWarning
}

// Controller reconciles policies' status. Build it with New and Run it.
type Controller struct {
	cfg      Config
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller; nothing is watched until Run.
func New(cfg Config) *Controller {
	c := &Controller{
		cfg: cfg,
		informer: cache.NewSharedIndexInformer(&registry.ListWatch{Stores: cfg.Stores, Resource: validatingadmissionpolicy.Resource},
			&admissionregistrationv1.ValidatingAdmissionPolicy{}, 0, cache.Indexers{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ControllerName}),
	}
	enqueue := func(obj interface{}) {
		if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok && p.Name != "" {
			c.queue.Add(p.Name)
		}
	}
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	return c
}

// Run reconciles until ctx ends, with one worker (type checking is CPU work, and
// policies are few).
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	go c.informer.Run(ctx.Done())
	if !cache.WaitForNamedCacheSync(ControllerName, ctx.Done(), c.informer.HasSynced) {
		return
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.reconcile(ctx, name); err != nil {
		if ctx.Err() == nil {
			slog.Warn("writing ValidatingAdmissionPolicy status; will retry", "policy", name, "err", err)
		}
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// reconcile type-checks the policy name when its generation is newer than the one its
// status observed, and writes the warnings and that generation (a policy gone meanwhile
// is left alone). Mirrors Controller.reconcile.
func (c *Controller) reconcile(ctx context.Context, name string) error {
	obj, exists, err := c.informer.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	policy, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok || policy.Generation <= policy.Status.ObservedGeneration {
		return nil
	}
	warnings := c.cfg.Check(policy)
	store := c.cfg.Stores.Store(validatingadmissionpolicy.Resource)
	if store == nil {
		return fmt.Errorf("%s is not served", validatingadmissionpolicy.Resource)
	}
	status := store.WithStrategy(validatingadmissionpolicy.StatusStrategy{})
	_, _, err = status.Update(ctx, "", name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		p := old.(*admissionregistrationv1.ValidatingAdmissionPolicy).DeepCopy()
		p.Status.ObservedGeneration = policy.Generation
		p.Status.TypeChecking = &admissionregistrationv1.TypeChecking{ExpressionWarnings: warnings}
		return p, nil
	}), &metav1.UpdateOptions{FieldManager: ControllerName})
	return err
}
