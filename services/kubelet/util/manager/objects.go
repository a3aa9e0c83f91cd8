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
	return NewWatchBasedManager(v1.Resource("configmaps"), ListWatchFuncs{
		List: func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().ConfigMaps(ns).List(ctx, opts)
		},
		Watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().ConfigMaps(ns).Watch(ctx, opts)
		},
	}, podutil.VisitPodConfigmapNames, func(cm *v1.ConfigMap) bool { return ptr.Deref(cm.Immutable, false) })
}

// NewSecretManager caches the Secrets registered pods use (volumes, projected sources,
// env, envFrom, image pull secrets). Mirrors secret.NewWatchingSecretManager.
func NewSecretManager(client kubernetes.Interface) *Manager[*v1.Secret] {
	return NewWatchBasedManager(v1.Resource("secrets"), ListWatchFuncs{
		List: func(ctx context.Context, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Secrets(ns).List(ctx, opts)
		},
		Watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Secrets(ns).Watch(ctx, opts)
		},
	}, podutil.VisitPodSecretNames, func(s *v1.Secret) bool { return ptr.Deref(s.Immutable, false) })
}
