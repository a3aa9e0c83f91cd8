package aggregator

import (
	"context"
	"errors"
	"log/slog"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/apiregistration/apiservice"
	"skiff.dev/services/apiserver/registry/rest"
)

// AutoManagedAlways marks the APIServices autoregistration keeps in line with what is
// served all along: those of custom resource group versions. Kube's.
const AutoManagedAlways = "true"

// The priorities of custom resource group versions: low, below every built-in group;
// versions within a group sort as kube sorts version names. Kube's.
const (
	crdGroupPriority   = 1000
	crdVersionPriority = 100
)

// crdRegistration keeps a local APIService for every group version a
// CustomResourceDefinition serves. Mirrors kube's crdregistration controller.
type crdRegistration struct {
	a        *Aggregator
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// crdKey is the queue's one key: every change of a CRD or an APIService reconciles
// every CRD APIService (a deleted one comes back).
const crdKey = "crds"

func newCRDRegistration(a *Aggregator) *crdRegistration {
	if a.cfg.Stores.Store(apiextensionsv1.Resource("customresourcedefinitions")) == nil {
		return nil
	}
	c := &crdRegistration{a: a,
		informer: cache.NewSharedIndexInformer(&registry.ListWatch{Stores: a.cfg.Stores, Resource: apiextensionsv1.Resource("customresourcedefinitions")},
			&apiextensionsv1.CustomResourceDefinition{}, 0, cache.Indexers{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "crd_autoregistration"}),
	}
	enqueue := func(interface{}) { c.queue.Add(crdKey) }
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) }, DeleteFunc: enqueue,
	})
	return c
}

// run reconciles until ctx ends; the APIService informer has synced.
func (c *crdRegistration) run(ctx context.Context) {
	defer c.queue.ShutDown()
	go c.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return
	}
	c.queue.Add(crdKey)
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(ctx); err != nil {
			if ctx.Err() == nil {
				slog.Warn("registering the APIServices of custom resources; will retry", "err", err)
			}
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// sync creates the APIService of each group version a CRD serves and is missing one,
// and deletes those it made whose group version no CRD serves any more. An APIService
// of the same name made by someone else is left alone.
func (c *crdRegistration) sync(ctx context.Context) error {
	want := map[string]*apiregistrationv1.APIService{}
	for _, obj := range c.informer.GetStore().List() {
		crd := obj.(*apiextensionsv1.CustomResourceDefinition)
		if c.a.localSet.Has(crd.Spec.Group) {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			name := v.Name + "." + crd.Spec.Group
			want[name] = &apiregistrationv1.APIService{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{AutoManagedLabel: AutoManagedAlways}},
				Spec: apiregistrationv1.APIServiceSpec{Group: crd.Spec.Group, Version: v.Name,
					GroupPriorityMinimum: crdGroupPriority, VersionPriority: crdVersionPriority},
			}
		}
	}
	store := c.a.cfg.Stores.Store(apiservice.Resource)
	var errs []error
	for name, desired := range want {
		obj, exists, err := c.a.informer.GetStore().GetByKey(name)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !exists:
			if _, err := store.Create(ctx, "", desired, &metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, err)
			}
		case obj.(*apiregistrationv1.APIService).Labels[AutoManagedLabel] == AutoManagedAlways &&
			!sameSpec(obj.(*apiregistrationv1.APIService).Spec, desired.Spec):
			_, _, err := store.Update(ctx, "", name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
				s := old.DeepCopyObject().(*apiregistrationv1.APIService)
				s.Spec = desired.Spec
				return s, nil
			}), &metav1.UpdateOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, obj := range c.a.informer.GetStore().List() {
		s := obj.(*apiregistrationv1.APIService)
		if s.Labels[AutoManagedLabel] != AutoManagedAlways || want[s.Name] != nil {
			continue
		}
		uid := s.UID
		if _, _, err := store.Delete(ctx, "", s.Name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil &&
			!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
