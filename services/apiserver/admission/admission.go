// Package admission holds the checks that run on a write after it is decoded and before
// it reaches storage. Mirrors k8s.io/apiserver/pkg/admission: plugins validate, and a
// few mutate as kube's do (ServiceAccount); defaulting and validation proper live in
// each resource's strategy.
package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilcache "k8s.io/apimachinery/pkg/util/cache"

	"skiff.dev/services/apiserver/registry/rest"
)

// Operation is the kind of write being admitted.
type Operation string

// The operations admission sees.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// Attributes describe one write. Mirrors admission.Attributes.
type Attributes struct {
	Operation   Operation
	Resource    schema.GroupVersionResource
	Subresource string
	Namespace   string
	Name        string
	// Object is the object written: the new object on create and update, nil on delete.
	// A plugin may change it (mutating admission, e.g. ServiceAccount).
	Object runtime.Object
	// OldObject is the stored object an update replaces, nil otherwise. Read only.
	OldObject runtime.Object
}

// Interface admits or rejects a write; the error is returned to the client as is, so it
// should be an API status error (403, 404, 422).
type Interface interface {
	Admit(ctx context.Context, a Attributes) error
}

// Chain runs plugins in order and stops at the first rejection.
type Chain []Interface

// Admit runs every plugin.
func (c Chain) Admit(ctx context.Context, a Attributes) error {
	for _, p := range c {
		if err := p.Admit(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// NamespaceLifecycle rejects creating namespaced objects in a namespace that does not
// exist (404 NotFound) or is being deleted (403 Forbidden), and deleting the namespaces
// the system needs. Mirrors the NamespaceLifecycle admission plugin
// (k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle): the namespace is read
// from the watch cache, as kube's plugin reads its informer, and from etcd when the cache
// does not have it (it may lag a create by a moment) or when this plugin admitted the
// namespace's deletion in the last ForceLiveLookupTTL and the cache still shows it
// Active. Build it with NewNamespaceLifecycle.
type NamespaceLifecycle struct {
	namespaces rest.Getter
	// recentlyDeleted holds the namespaces whose deletion was admitted, for
	// ForceLiveLookupTTL (kube's forceLiveLookupCache).
	recentlyDeleted *utilcache.LRUExpireCache
}

// ForceLiveLookupTTL is how long after admitting a namespace's deletion creates in it
// read the namespace from etcd rather than trust a cache that still shows it Active
// (kube's forceLiveLookupTTL).
const ForceLiveLookupTTL = 30 * time.Second

// NewNamespaceLifecycle returns the plugin reading namespaces from namespaces.
func NewNamespaceLifecycle(namespaces rest.Getter) *NamespaceLifecycle {
	return &NamespaceLifecycle{namespaces: namespaces, recentlyDeleted: utilcache.NewLRUExpireCache(100)}
}

// immortalNamespaces cannot be deleted, as in kube-apiserver.
var immortalNamespaces = map[string]bool{
	metav1.NamespaceDefault: true, "kube-system": true, "kube-public": true, corev1.NamespaceNodeLease: true,
}

// Admit checks a write against namespace lifecycle.
func (l *NamespaceLifecycle) Admit(ctx context.Context, a Attributes) error {
	if a.Resource.Group == "" && a.Resource.Resource == "namespaces" {
		if a.Operation == Delete {
			if immortalNamespaces[a.Name] {
				return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name, fmt.Errorf("this namespace may not be deleted"))
			}
			l.recentlyDeleted.Add(a.Name, true, ForceLiveLookupTTL)
		}
		return nil
	}
	if a.Operation != Create || a.Namespace == "" || a.Subresource != "" {
		return nil
	}
	obj, err := l.namespaces.Get(ctx, "", a.Namespace, &metav1.GetOptions{ResourceVersion: "0"})
	live := apierrors.IsNotFound(err)
	if err == nil {
		if _, deleted := l.recentlyDeleted.Get(a.Namespace); deleted {
			ns, ok := obj.(*corev1.Namespace)
			live = ok && ns.Status.Phase != corev1.NamespaceTerminating
		}
	}
	if live {
		obj, err = l.namespaces.Get(ctx, "", a.Namespace, &metav1.GetOptions{})
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return apierrors.NewNotFound(corev1.Resource("namespaces"), a.Namespace)
		}
		return err
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return apierrors.NewInternalError(errors.New("namespace storage returned a non-namespace"))
	}
	if ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil {
		return apierrors.NewForbidden(a.Resource.GroupResource(), a.Name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", a.Namespace))
	}
	return nil
}
