package rest

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// CachedReader is a Getter that can show a reader the watch cache's own object without
// a copy (registry.Store).
type CachedReader interface {
	// ReadCached calls read with namespace/name as the watch cache holds it, if it does,
	// and reports whether the cache served the read.
	ReadCached(namespace, name string, read func(runtime.Object)) (bool, error)
}

// GetCachedFirst reads namespace/name from the watch cache (resourceVersion "0") and
// returns it when accept holds for it (a nil accept takes any object). Otherwise (the
// cache lacks the object, or shows it otherwise than the caller expects: it may lag a
// write by a moment) it reads etcd (a consistent read) and returns that answer, accepted
// or not, so a lagging cache costs a read and never a wrong refusal. Errors are the
// getter's: 404 NotFound when etcd has no such object.
//
// From a CachedReader the object is the watch cache's own, not a copy, as an informer's
// lister returns in kube: callers must not modify it. accept must not either.
//
// It is how skiff's in-process readers (admission plugins, the authorizer, the token
// authenticator, TokenRequest) read what kube's read from informers or the registry.
func GetCachedFirst(ctx context.Context, getter Getter, namespace, name string, accept func(runtime.Object) bool) (runtime.Object, error) {
	if cached, ok := getter.(CachedReader); ok {
		var found runtime.Object
		if _, err := cached.ReadCached(namespace, name, func(obj runtime.Object) {
			if accept == nil || accept(obj) {
				found = obj
			}
		}); err != nil {
			return nil, err
		}
		if found != nil {
			return found, nil
		}
		return getter.Get(ctx, namespace, name, &metav1.GetOptions{})
	}
	obj, err := getter.Get(ctx, namespace, name, &metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case err == nil && (accept == nil || accept(obj)):
		return obj, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	return getter.Get(ctx, namespace, name, &metav1.GetOptions{})
}
