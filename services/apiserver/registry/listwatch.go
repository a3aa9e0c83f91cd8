package registry

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// ListWatch lists and watches one resource's Store inside the apiserver's process, for
// a client-go informer (it is a cache.ListerWatcher): the objects it returns are the
// watch cache's own, never encoded or decoded, so an informer fed by it keeps no copy
// of its own. They fall under the watch cache's sharing rule: nothing may mutate them,
// as no informer's user may mutate what an informer hands out.
//
// It is how the apiserver's RBAC authorizer reads its policy, as kube-apiserver's reads
// its own; there is no authentication, authorization or admission on this path, so
// nothing outside the apiserver gets it (every other component lists and watches over
// the API). Options are those
// of an HTTP list or watch (selectors, resourceVersion, limit, continue, bookmarks);
// timeoutSeconds is not applied, since no connection is ever rebalanced. Errors are
// the Store's (410 Expired for a compacted resourceVersion, 400 for a field selector
// the resource does not support); a resource the Stores do not serve (yet) is a 503.
type ListWatch struct {
	// Stores finds Resource's Store; it is read at each list or watch, so it may still
	// be filling when the ListWatch is built.
	Stores Stores
	// Resource is what is listed and watched, e.g. {Resource: "pods"}.
	Resource schema.GroupResource
	// Namespace limits lists and watches to one namespace; "" is every namespace.
	Namespace string
	// Tweak, when set, changes the options of every list and watch first (a field
	// selector, say), as client-go's TweakListOptionsFunc does for its informers.
	Tweak func(*metav1.ListOptions)
}

// prepare finds the Store and converts an informer's options, tweaked, to the Store's, parsing
// the selectors as the HTTP handler does (400 Bad Request for one that does not parse).
func (lw *ListWatch) prepare(opts metav1.ListOptions) (*Store, *metainternalversion.ListOptions, error) {
	s := lw.Stores.Store(lw.Resource)
	if s == nil {
		return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s is not served", lw.Resource))
	}
	if lw.Tweak != nil {
		lw.Tweak(&opts)
	}
	in := &metainternalversion.ListOptions{}
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, in, nil); err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	return s, in, nil
}

// List implements cache.Lister.
func (lw *ListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// ListWithContext implements cache.ListerWithContext: Store.List.
func (lw *ListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	s, in, err := lw.prepare(opts)
	if err != nil {
		return nil, err
	}
	return s.List(ctx, lw.Namespace, in)
}

// Watch implements cache.Watcher.
func (lw *ListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// WatchWithContext implements cache.WatcherWithContext: Store.Watch, until ctx ends or
// the informer stops it.
func (lw *ListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s, in, err := lw.prepare(opts)
	if err != nil {
		return nil, err
	}
	return s.Watch(ctx, lw.Namespace, in)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list, then watch: in
// the apiserver's process a list from the watch cache costs no more than the stream of
// initial events would.
func (lw *ListWatch) IsWatchListSemanticsUnSupported() bool { return true }
