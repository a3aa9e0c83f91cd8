// Package namespace finishes namespace deletion: it deletes everything in a terminating
// namespace and then removes the namespace itself. Mirrors kube-controller-manager's
// namespace controller (pkg/controller/namespace and its NamespacedResourcesDeleter),
// run inside the apiserver because skiff has no controller manager.
package namespace

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/registry/rest"
)

// Content is one namespaced resource whose objects a terminating namespace must lose.
type Content interface {
	rest.Lister
	rest.GracefulDeleter
}

// Namespaces is what the controller needs of the namespaces resource.
type Namespaces interface {
	rest.Watcher
	// Finalize removes an emptied, terminating namespace.
	Finalize(ctx context.Context, name string) error
}

// Controller deletes the contents of terminating namespaces, then the namespaces.
type Controller struct {
	// Namespaces is the namespaces resource.
	Namespaces Namespaces
	// Contents are every namespaced resource.
	Contents []Content
	// RetryInterval is how often a namespace whose contents are still going away (pods in
	// graceful termination) is checked again; default 1 s.
	RetryInterval time.Duration
}

// Run watches namespaces until ctx ends, re-watching with backoff when the watch breaks.
func (c *Controller) Run(ctx context.Context) {
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	terminating := map[string]bool{}
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	ticker := time.NewTicker(c.RetryInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		w, err := c.Namespaces.Watch(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
		if err != nil {
			slog.Warn("namespace controller: watch namespaces; will retry", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Step()):
			}
			continue
		}
		c.loop(ctx, w, ticker, terminating)
		w.Stop()
	}
}

// loop handles one watch until it ends.
func (c *Controller) loop(ctx context.Context, w watch.Interface, ticker *time.Ticker, terminating map[string]bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			ns, isNamespace := ev.Object.(*corev1.Namespace)
			if !isNamespace {
				continue
			}
			switch {
			case ev.Type == watch.Deleted:
				delete(terminating, ns.Name)
			case ns.DeletionTimestamp != nil:
				terminating[ns.Name] = true
				c.sync(ctx, ns.Name, terminating)
			}
		case <-ticker.C:
			for name := range terminating {
				c.sync(ctx, name, terminating)
			}
		}
	}
}

// sync deletes what is left in namespace name and finalizes it once nothing is left.
func (c *Controller) sync(ctx context.Context, name string, terminating map[string]bool) {
	remaining, err := c.deleteContents(ctx, name)
	if err != nil {
		slog.Warn("namespace controller: deleting contents; will retry", "namespace", name, "err", err)
		return
	}
	if remaining > 0 {
		return
	}
	if err := c.Namespaces.Finalize(ctx, name); err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("namespace controller: finalize; will retry", "namespace", name, "err", err)
		return
	}
	delete(terminating, name)
	slog.Info("namespace deleted", "namespace", name)
}

// deleteContents deletes every object in namespace that is not already being deleted
// and returns how many objects remain.
func (c *Controller) deleteContents(ctx context.Context, namespace string) (int, error) {
	remaining := 0
	for _, content := range c.Contents {
		list, err := content.List(ctx, namespace, &metainternalversion.ListOptions{})
		if err != nil {
			return 0, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return 0, err
		}
		for _, item := range items {
			m, err := meta.Accessor(item)
			if err != nil {
				return 0, err
			}
			if m.GetDeletionTimestamp() != nil {
				remaining++
				continue
			}
			uid := m.GetUID()
			_, deleted, err := content.Delete(ctx, namespace, m.GetName(), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return 0, err
			}
			if err == nil && !deleted {
				remaining++
			}
		}
	}
	return remaining, nil
}
