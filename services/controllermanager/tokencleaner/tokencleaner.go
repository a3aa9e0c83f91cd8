// Package tokencleaner is kube-controller-manager's token cleaner: it deletes a bootstrap
// token Secret (kube-system, type bootstrap.kubernetes.io/token) once the expiration it
// carries has passed, so an expired token is gone from the cluster and not merely
// refused. Mirrors k8s.io/kubernetes/pkg/controller/bootstrap/tokencleaner.go. kube
// leaves the controller off unless --controllers names it, and kubeadm names it; skiff's
// controller-manager runs it by default, as a kubeadm cluster does.
package tokencleaner

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/internal/pki"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "token-cleaner-controller"

// Controller is the token cleaner.
type Controller struct {
	client       kubernetes.Interface
	secretLister corelisters.SecretLister
	synced       cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	clock        clock.Clock
	log          *slog.Logger
}

// New builds the token cleaner over secrets, deleting through client; clock says when a
// token has expired (nil: the real clock). The queue waits on the real clock.
func New(secrets coreinformers.SecretInformer, client kubernetes.Interface, clk clock.Clock) *Controller {
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Controller{
		client:       client,
		secretLister: secrets.Lister(),
		synced:       secrets.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "token_cleaner"}),
		clock: clk,
		log:   slog.With("controller", Name),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = secrets.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			s, ok := obj.(*corev1.Secret)
			return ok && s.Type == pki.SecretTypeBootstrapToken && s.Namespace == metav1.NamespaceSystem
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
		},
	})
	return c
}

// Run waits for the Secret informer's cache, then deletes expired tokens with one worker
// (as kube runs it) until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	worker.Run(ctx, "token_cleaner", c.queue, []cache.InformerSynced{c.synced}, 1, c.log, c.syncFunc)
}

// syncFunc deletes the Secret at key if its token has expired, or looks at it again
// when it will. Mirrors syncFunc and evalSecret.
func (c *Controller) syncFunc(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	secret, err := c.secretLister.Secrets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if secret.Type != pki.SecretTypeBootstrapToken {
		return nil
	}
	ttl, expired := pki.BootstrapTokenSecretExpiration(secret, c.clock.Now())
	if !expired {
		if ttl > 0 {
			return &worker.Requeue{After: ttl}
		}
		return nil
	}
	// The UID precondition spares a Secret recreated under the same name meanwhile.
	err = c.client.CoreV1().Secrets(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &secret.UID}})
	switch {
	case err == nil:
		c.log.Info("deleted expired bootstrap token", "secret", key, "expiration", string(secret.Data[pki.BootstrapTokenExpirationKey]))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	}
	return err
}
