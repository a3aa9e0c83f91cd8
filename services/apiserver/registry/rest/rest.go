// Package rest defines what the HTTP layer may ask of a resource's storage: one small
// interface per verb, so a subresource implements only the verbs it serves (pods/binding
// creates, pods/status gets and updates). Mirrors k8s.io/apiserver/pkg/registry/rest.
package rest

import (
	"context"
	"net/http"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// Storage is the root every resource implements: it can make an empty object of its kind,
// into which request bodies are decoded.
type Storage interface {
	New() runtime.Object
}

// GroupVersionKindProvider is implemented by a subresource whose kind lives in another
// group than its resource: serviceaccounts/token reads and writes
// authentication.k8s.io/v1 TokenRequests under core v1. Mirrors
// rest.GroupVersionKindProvider.
type GroupVersionKindProvider interface {
	// GroupVersionKind is the kind served, given the group version of the resource.
	GroupVersionKind(containingGV schema.GroupVersion) schema.GroupVersionKind
}

// Getter reads one object by namespace ("" for cluster-scoped) and name. opts may be
// nil; its resourceVersion "0" allows an answer from the watch cache.
type Getter interface {
	Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error)
}

// Lister lists a collection; namespace "" lists across all namespaces.
type Lister interface {
	NewList() runtime.Object
	List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error)
}

// Creater stores a new object and returns it as stored.
type Creater interface {
	Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error)
}

// UpdatedObjectInfo computes the new object from the current one, so PUT (replace) and
// PATCH (apply a patch to the current state) share one update path. Mirrors
// rest.UpdatedObjectInfo.
type UpdatedObjectInfo interface {
	UpdatedObject(ctx context.Context, oldObj runtime.Object) (newObj runtime.Object, err error)
}

// UpdatedObjectFunc adapts a function to UpdatedObjectInfo.
type UpdatedObjectFunc func(ctx context.Context, oldObj runtime.Object) (runtime.Object, error)

// UpdatedObject calls f.
func (f UpdatedObjectFunc) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	return f(ctx, oldObj)
}

// DefaultUpdatedObjectInfo returns an UpdatedObjectInfo that replaces the object with obj,
// as a PUT does.
func DefaultUpdatedObjectInfo(obj runtime.Object) UpdatedObjectInfo {
	return UpdatedObjectFunc(func(context.Context, runtime.Object) (runtime.Object, error) {
		return obj.DeepCopyObject(), nil
	})
}

// Updater replaces an object. The bool is true if the update created it.
type Updater interface {
	Update(ctx context.Context, namespace, name string, objInfo UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error)
}

// GracefulDeleter deletes an object, possibly gracefully: the bool is true if the object
// is gone now, false if it was only marked for deletion (deletionTimestamp set).
type GracefulDeleter interface {
	Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error)
}

// ValidateObjectFunc checks one object an operation is about to act on, e.g. admission of
// each object a DeleteCollection deletes. Mirrors rest.ValidateObjectFunc.
type ValidateObjectFunc func(ctx context.Context, obj runtime.Object) error

// CollectionDeleter deletes every object of a collection matching listOpts, each as a
// Delete with opts would (gracefully for pods), after deleteValidation accepts it. It
// returns the list of the objects it acted on. Mirrors rest.CollectionDeleter.
type CollectionDeleter interface {
	DeleteCollection(ctx context.Context, namespace string, deleteValidation ValidateObjectFunc, opts *metav1.DeleteOptions, listOpts *metainternalversion.ListOptions) (runtime.Object, error)
}

// Watcher streams changes to a collection filtered by opts.
type Watcher interface {
	Watch(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (watch.Interface, error)
}

// TableConvertor renders an object or a list as a meta.k8s.io/v1 Table for kubectl's
// human-readable output. Mirrors rest.TableConvertor.
type TableConvertor interface {
	ConvertToTable(ctx context.Context, object runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error)
}

// Connecter is a subresource that hands the request to another server instead of
// reading or writing an object: pods/exec, pods/attach, pods/portforward and pods/log
// reach the pod's kubelet through exec-proxy. The handler it returns serves the
// request as it came (an upgrade included); the caller has been authenticated and
// authorized already. Mirrors k8s.io/apiserver/pkg/registry/rest.Connecter.
type Connecter interface {
	// Connect returns the handler for the object namespace/name. Errors (API
	// errors, e.g. 503 when the backend is not configured) are returned before
	// anything is written.
	Connect(ctx context.Context, namespace, name string) (http.Handler, error)
	// ConnectMethods are the HTTP methods served, e.g. GET and POST; discovery
	// reports GET as the verb get and POST as create.
	ConnectMethods() []string
}
