// Package admission holds the checks that run on a write after it is decoded and before
// it reaches storage. Mirrors k8s.io/apiserver/pkg/admission: mutating plugins
// (ServiceAccount, mutating webhooks) run first, validating plugins (NodeRestriction,
// validating webhooks) after them; defaulting and validation proper live in each
// resource's strategy.
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
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry/rest"
)

// Operation is the kind of write being admitted.
type Operation string

// The operations admission sees.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
	// Connect is a connection to a subresource (pods/exec, attach, portforward,
	// proxy); Object is its options (PodExecOptions...).
	Connect Operation = "CONNECT"
)

// Attributes describe one write. Mirrors admission.Attributes.
type Attributes struct {
	Operation Operation
	// Resource is the resource written, in the version of the request, e.g. apps/v1
	// deployments.
	Resource    schema.GroupVersionResource
	Subresource string
	// Kind is the kind of Object and OldObject as the request reads and writes them: the
	// resource's kind, or the subresource's (autoscaling/v1 Scale for
	// deployments/scale). Empty when the caller does not know it.
	Kind      schema.GroupVersionKind
	Namespace string
	Name      string
	// Object is the object written: the new object on create and update, nil on delete.
	// A mutating plugin may change it in place (ServiceAccount, mutating webhooks); a
	// validating plugin must not.
	Object runtime.Object
	// OldObject is the stored object an update replaces or a delete removes, nil on
	// create. Read only: it may be the watch cache's own object.
	OldObject runtime.Object
	// UserInfo is the user making the request (name, uid, groups, extra); nil means the
	// user of the request's context (genericapirequest.UserFrom).
	UserInfo user.Info
	// DryRun is true when the write is judged but not persisted (dryRun=All).
	DryRun bool
	// Options is the operation's options as kube passes them to admission: a
	// *metav1.CreateOptions on create, *metav1.UpdateOptions on update (PATCH and apply
	// included), *metav1.DeleteOptions on delete; nil when the caller has none.
	Options runtime.Object
	// Reinvocation is the state of one request's mutating phase, shared by the plugins
	// that may run twice in it (mutating webhooks with reinvocationPolicy IfNeeded).
	// Chain sets it; a plugin called outside a Chain sees nil.
	Reinvocation *ReinvocationContext
}

// User is a.UserInfo, or the user of ctx when a names none; nil when neither has one.
func (a Attributes) User(ctx context.Context) user.Info {
	if a.UserInfo != nil {
		return a.UserInfo
	}
	u, _ := genericapirequest.UserFrom(ctx)
	return u
}

// Interface admits or rejects a write; the error is returned to the client as is, so it
// should be an API status error (403, 404, 422).
type Interface interface {
	Admit(ctx context.Context, a Attributes) error
}

// Chain runs admission in kube's two phases: every Mutating plugin in order, then every
// Validating plugin in order, stopping at the first rejection. When a mutating plugin
// asks for it (a mutating webhook whose patch changed the object, see
// ReinvocationContext), the Mutating phase runs a second time before validation, as
// kube's reinvocation handler does: mutating plugins must tolerate seeing their own
// output again. Mirrors admission.chainAdmissionHandler with
// admission.newReinvocationHandler.
type Chain struct {
	// Mutating plugins may change the object (ServiceAccount, mutating webhooks). On a
	// delete they see no OldObject, as kube's mutating admission of a delete does not.
	Mutating []Interface
	// Validating plugins judge the object as the Mutating phase left it and never
	// change it (NodeRestriction, validating webhooks).
	Validating []Interface
}

// Admit runs the Mutating phase (twice when a plugin asks to be reinvoked), then the
// Validating phase.
func (c Chain) Admit(ctx context.Context, a Attributes) error {
	if a.Reinvocation == nil {
		a.Reinvocation = &ReinvocationContext{}
	}
	mutating := a
	if a.Operation == Delete {
		mutating.OldObject = nil
	}
	if err := runAll(ctx, c.Mutating, mutating); err != nil {
		return err
	}
	if a.Reinvocation.shouldReinvoke {
		a.Reinvocation.isReinvoke = true
		if err := runAll(ctx, c.Mutating, mutating); err != nil {
			return err
		}
	}
	return runAll(ctx, c.Validating, a)
}

func runAll(ctx context.Context, plugins []Interface, a Attributes) error {
	for _, p := range plugins {
		if err := p.Admit(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// ReinvocationContext is the state one request's mutating phase keeps between its two
// rounds. Mirrors admission.ReinvocationContext.
type ReinvocationContext struct {
	isReinvoke, shouldReinvoke bool
	values                     map[string]any
}

// IsReinvoke reports whether the mutating phase is running its second round.
func (rc *ReinvocationContext) IsReinvoke() bool { return rc != nil && rc.isReinvoke }

// SetShouldReinvoke asks for a second round of the mutating phase (ignored in the
// second round, and outside a Chain).
func (rc *ReinvocationContext) SetShouldReinvoke() {
	if rc != nil {
		rc.shouldReinvoke = true
	}
}

// Value is the state a plugin stored under key, nil when none.
func (rc *ReinvocationContext) Value(key string) any {
	if rc == nil {
		return nil
	}
	return rc.values[key]
}

// SetValue stores a plugin's state under key (its name) for the second round.
func (rc *ReinvocationContext) SetValue(key string, v any) {
	if rc == nil {
		return
	}
	if rc.values == nil {
		rc.values = map[string]any{}
	}
	rc.values[key] = v
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
