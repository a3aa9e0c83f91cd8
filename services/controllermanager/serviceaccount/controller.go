// Package serviceaccount makes sure every active namespace has its "default"
// ServiceAccount, creating it when a namespace appears and again when it is deleted.
// Mirrors kube-controller-manager's serviceaccount-controller
// (pkg/controller/serviceaccount/serviceaccounts_controller.go).
package serviceaccount

import (
	"context"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "serviceaccount-controller"

// Controller creates the service accounts every namespace must have.
type Controller struct {
	client          kubernetes.Interface
	names           []string
	namespaceLister corelisters.NamespaceLister
	saLister        corelisters.ServiceAccountLister
	synced          []cache.InformerSynced
	queue           workqueue.TypedRateLimitingInterface[string]
	log             *slog.Logger
}

// New is the controller over the namespace and ServiceAccount informers; names are the
// service accounts to ensure, nil meaning ["default"] (kube's
// DefaultServiceAccountsControllerOptions).
func New(namespaces coreinformers.NamespaceInformer, serviceAccounts coreinformers.ServiceAccountInformer, client kubernetes.Interface, names []string) *Controller {
	if names == nil {
		names = []string{"default"}
	}
	c := &Controller{
		client: client, names: names,
		namespaceLister: namespaces.Lister(), saLister: serviceAccounts.Lister(),
		synced: []cache.InformerSynced{namespaces.Informer().HasSynced, serviceAccounts.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount"}),
		log: slog.Default().With("controller", Name),
	}
	addNamespace := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			c.queue.Add(ns.Name)
		}
	}
	_, _ = namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    addNamespace,
		UpdateFunc: func(_, obj any) { addNamespace(obj) },
	})
	_, _ = serviceAccounts.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if sa, ok := obj.(*corev1.ServiceAccount); ok && slices.Contains(c.names, sa.Name) {
				c.queue.Add(sa.Namespace)
			}
		},
	})
	return c
}

// Run works the queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, c.queue, c.synced, workers, c.log, c.sync)
}

// sync creates the service accounts namespace lacks, unless it is not Active.
func (c *Controller) sync(ctx context.Context, namespace string) error {
	ns, err := c.namespaceLister.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.Status.Phase != corev1.NamespaceActive || ns.DeletionTimestamp != nil {
		return nil // a terminating namespace is being emptied
	}
	for _, name := range c.names {
		if _, err := c.saLister.ServiceAccounts(namespace).Get(name); err == nil {
			continue
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
		_, err := c.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
		case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// the namespace began terminating after the lister's view
		default:
			return err
		}
	}
	return nil
}
