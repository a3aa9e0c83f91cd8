package rest

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GetCachedFirst reads namespace/name from the watch cache (resourceVersion "0") and
// returns it when accept holds for it (a nil accept takes any object). Otherwise (the
// cache lacks the object, or shows it otherwise than the caller expects: it may lag a
// write by a moment) it reads etcd (a consistent read) and returns that answer, accepted
// or not, so a lagging cache costs a read and never a wrong refusal. Errors are the
// getter's: 404 NotFound when etcd has no such object.
//
// It is how skiff's in-process readers (admission plugins, the authorizer, the token
// authenticator, TokenRequest) read what kube's read from informers or the registry.
func GetCachedFirst(ctx context.Context, getter Getter, namespace, name string, accept func(runtime.Object) bool) (runtime.Object, error) {
	obj, err := getter.Get(ctx, namespace, name, &metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case err == nil && (accept == nil || accept(obj)):
		return obj, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	return getter.Get(ctx, namespace, name, &metav1.GetOptions{})
}
