// Package serviceaccount makes sure every active namespace has its "default"
// ServiceAccount, creating it when a namespace appears and again when it is deleted.
// Mirrors kube-controller-manager's serviceaccounts controller
// (pkg/controller/serviceaccount/serviceaccounts_controller.go); it runs inside the
// apiserver, over the registry, until skiff's controller-manager adopts it.
package serviceaccount

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/apiserver/registry/rest"
)

// Namespaces is what the controller needs of the namespaces resource.
type Namespaces interface {
	rest.Getter
	rest.Watcher
}

// ServiceAccounts is what the controller needs of the serviceaccounts resource.
type ServiceAccounts interface {
	rest.Getter
	rest.Watcher
	rest.Creater
}

// Controller creates the service accounts every namespace must have.
type Controller struct {
	Namespaces      Namespaces
	ServiceAccounts ServiceAccounts
	// Names are the service accounts to ensure; nil means ["default"] (kube's
	// DefaultServiceAccountsControllerOptions).
	Names []string
}

// Run ensures the service accounts until ctx ends: it watches namespaces (every
// namespace, as it appears or changes) and service accounts (a deleted one is made
// again), and handles each namespace on one worker, retrying failures with backoff.
func (c *Controller) Run(ctx context.Context) {
	if c.Names == nil {
		c.Names = []string{"default"}
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount"})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		watchForever(ctx, "namespaces", c.Namespaces, func(ev watch.Event) {
			if ns, ok := ev.Object.(*corev1.Namespace); ok && ev.Type != watch.Deleted {
				queue.Add(ns.Name)
			}
		})
	}()
	go func() {
		defer wg.Done()
		watchForever(ctx, "serviceaccounts", c.ServiceAccounts, func(ev watch.Event) {
			if sa, ok := ev.Object.(*corev1.ServiceAccount); ok && ev.Type == watch.Deleted && slices.Contains(c.Names, sa.Name) {
				queue.Add(sa.Namespace)
			}
		})
	}()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		ns, shutdown := queue.Get()
		if shutdown {
			break
		}
		if err := c.sync(ctx, ns); err != nil {
			if ctx.Err() == nil {
				slog.Warn("serviceaccount controller: will retry", "namespace", ns, "err", err)
			}
			queue.AddRateLimited(ns)
		} else {
			queue.Forget(ns)
		}
		queue.Done(ns)
	}
	wg.Wait()
}

// sync creates the service accounts namespace lacks, unless it is going away.
func (c *Controller) sync(ctx context.Context, namespace string) error {
	obj, err := c.Namespaces.Get(ctx, "", namespace, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns := obj.(*corev1.Namespace); ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	for _, name := range c.Names {
		_, err := c.ServiceAccounts.Get(ctx, namespace, name, &metav1.GetOptions{ResourceVersion: "0"})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if _, err := c.ServiceAccounts.Create(ctx, namespace, sa, &metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// watchForever watches every object of w from the current state (resourceVersion "0"
// replays it as ADDED events), calling handle for each event, and watches again with
// backoff when the watch ends, until ctx ends.
func watchForever(ctx context.Context, what string, w rest.Watcher, handle func(watch.Event)) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	for ctx.Err() == nil {
		watcher, err := w.Watch(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
		if err != nil {
			slog.Warn("serviceaccount controller: watch; will retry", "resource", what, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Step()):
			}
			continue
		}
		func() {
			defer watcher.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-watcher.ResultChan():
					if !ok || ev.Type == watch.Error {
						return
					}
					handle(ev)
				}
			}
		}()
	}
}
