// Package namespace finishes namespace deletion: for a terminating namespace it
// discovers every namespaced resource that can be deleted, deletes its objects in that
// namespace (DeleteCollection, or one by one where the resource has no
// deletecollection), waits while any remain (pods in graceful termination, objects held
// by finalizers), and then removes the "kubernetes" finalizer through
// namespaces/NAME/finalize, upon which the apiserver removes the namespace. Mirrors
// kube-controller-manager's namespace-controller (pkg/controller/namespace and its
// deletion.NamespacedResourcesDeleter).
package namespace

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "namespace-controller"

// Controller deletes the contents of terminating namespaces, then finalizes them.
type Controller struct {
	client    kubernetes.Interface
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	lister    corelisters.NamespaceLister
	synced    cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger
}

// New is the controller over the namespace informer. client finalizes namespaces,
// disco finds the namespaced resources, dyn lists and deletes their objects; the
// identity needs kube's system:controller:namespace-controller role.
func New(namespaces coreinformers.NamespaceInformer, client kubernetes.Interface, disco discovery.DiscoveryInterface, dyn dynamic.Interface) *Controller {
	c := &Controller{
		client: client, discovery: disco, dynamic: dyn,
		lister: namespaces.Lister(), synced: namespaces.Informer().HasSynced,
		// kube's namespace queue: 5 ms doubling to 60 s per namespace.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 60*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace"}),
		log: slog.Default().With("controller", Name),
	}
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
			c.queue.Add(ns.Name)
		}
	}
	_, _ = namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return c
}

// Run works the queue with workers (kube's --concurrent-namespace-syncs) until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, c.queue, []cache.InformerSynced{c.synced}, workers, c.log, func(ctx context.Context, name string) error {
		err := c.sync(ctx, name)
		if remaining, ok := err.(*resourcesRemaining); ok {
			// As kube: look again halfway through the longest grace period.
			return &worker.Requeue{After: time.Duration(remaining.estimate/2+1) * time.Second}
		}
		return err
	})
}

// resourcesRemaining says some content is still going away; estimate is how long
// (seconds) the slowest graceful termination may take.
type resourcesRemaining struct{ estimate int64 }

func (e *resourcesRemaining) Error() string {
	return fmt.Sprintf("some content remains in the namespace, estimate %d seconds before it is removed", e.estimate)
}

// sync empties terminating namespace name and finalizes it once nothing is left.
func (c *Controller) sync(ctx context.Context, name string) error {
	ns, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil || !hasFinalizer(ns) {
		return nil
	}
	if err := c.deleteAllContent(ctx, name); err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := c.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !hasFinalizer(latest) {
			return nil
		}
		latest.Spec.Finalizers = withoutFinalizer(latest.Spec.Finalizers)
		_, err = c.client.CoreV1().Namespaces().Finalize(ctx, latest, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		c.log.Info("namespace emptied and finalized", "namespace", name)
	}
	return err
}

func hasFinalizer(ns *corev1.Namespace) bool {
	for _, f := range ns.Spec.Finalizers {
		if f == corev1.FinalizerKubernetes {
			return true
		}
	}
	return false
}

func withoutFinalizer(fs []corev1.FinalizerName) []corev1.FinalizerName {
	var out []corev1.FinalizerName
	for _, f := range fs {
		if f != corev1.FinalizerKubernetes {
			out = append(out, f)
		}
	}
	return out
}

// deletableResources are the namespaced resources discovery lists with the "delete"
// verb, with whether each also has "deletecollection". A group that failed discovery is
// an error (its content could be left behind), as in kube.
func (c *Controller) deletableResources() (map[schema.GroupVersionResource]bool, error) {
	lists, err := c.discovery.ServerPreferredNamespacedResources()
	if err != nil {
		return nil, fmt.Errorf("discovering namespaced resources: %w", err)
	}
	out := map[schema.GroupVersionResource]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			verbs := sets.New(r.Verbs...)
			if strings.Contains(r.Name, "/") || !verbs.Has("delete") || !verbs.Has("list") {
				continue
			}
			out[gv.WithResource(r.Name)] = verbs.Has("deletecollection")
		}
	}
	return out, nil
}

// deleteAllContent deletes every object of every deletable namespaced resource in
// namespace, background propagation. It returns nil once nothing is left, a
// *resourcesRemaining while pods terminate gracefully, and an error otherwise
// (including objects held by finalizers, retried with backoff).
func (c *Controller) deleteAllContent(ctx context.Context, namespace string) error {
	resources, err := c.deletableResources()
	if err != nil {
		return err
	}
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &background}
	var estimate int64
	var remaining []string
	for gvr, collection := range resources {
		client := c.dynamic.Resource(gvr).Namespace(namespace)
		if collection {
			err = client.DeleteCollection(ctx, opts, metav1.ListOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				err = nil
			}
		} else {
			list, lerr := client.List(ctx, metav1.ListOptions{})
			err = lerr
			if lerr == nil {
				for _, item := range list.Items {
					if derr := client.Delete(ctx, item.GetName(), opts); derr != nil && !apierrors.IsNotFound(derr) {
						err = derr
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("deleting %s: %w", gvr.GroupResource(), err)
		}
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		if len(list.Items) == 0 {
			continue
		}
		remaining = append(remaining, fmt.Sprintf("%s has %d", gvr.GroupResource(), len(list.Items)))
		if gvr.GroupResource() == corev1.Resource("pods") {
			for _, item := range list.Items {
				if grace := item.GetDeletionGracePeriodSeconds(); grace != nil && *grace > estimate {
					estimate = *grace
				}
			}
		}
	}
	if len(remaining) == 0 {
		return nil
	}
	if estimate > 0 {
		return &resourcesRemaining{estimate: estimate}
	}
	return fmt.Errorf("content remains: %s", strings.Join(remaining, ", "))
}
