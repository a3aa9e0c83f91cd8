package manager

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/internal/podutil"
)

// NewConfigMapManager caches the ConfigMaps registered pods use (volumes, projected
// sources, env, envFrom). Mirrors configmap.NewWatchingConfigMapManager.
func NewConfigMapManager(client kubernetes.Interface) *Manager[*v1.ConfigMap] {
	return NewWatchBasedManager(v1.Resource("configmaps"), listWatchOf[*v1.ConfigMapList](client.CoreV1().ConfigMaps),
		podutil.VisitPodConfigmapNames, func(cm *v1.ConfigMap) bool { return ptr.Deref(cm.Immutable, false) })
}

// NewSecretManager caches the Secrets registered pods use (volumes, projected sources,
// env, envFrom, image pull secrets). Mirrors secret.NewWatchingSecretManager.
func NewSecretManager(client kubernetes.Interface) *Manager[*v1.Secret] {
	return NewWatchBasedManager(v1.Resource("secrets"), listWatchOf[*v1.SecretList](client.CoreV1().Secrets),
		podutil.VisitPodSecretNames, func(s *v1.Secret) bool { return ptr.Deref(s.Immutable, false) })
}

// namespacedClient is what a typed client of one resource in one namespace offers for
// listing and watching; L is its list type.
type namespacedClient[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// listWatchOf lists and watches through the typed client in, e.g.
// client.CoreV1().ConfigMaps.
func listWatchOf[L runtime.Object, C namespacedClient[L]](in func(namespace string) C) ListWatchFuncs {
	return ListWatchFuncs{
		List: func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			return in(ns).List(ctx, opts)
		},
		Watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return in(ns).Watch(ctx, opts)
		},
	}
}
