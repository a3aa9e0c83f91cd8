// Package pvprotection is kube-controller-manager's PV protection controller
// ("persistentvolume-protection-controller"): every PersistentVolume carries the
// kubernetes.io/pv-protection finalizer, and a volume being deleted keeps it while it is
// Bound to a claim. Mirrors k8s.io/kubernetes/pkg/controller/volume/pvprotection.
package pvprotection

import (
	"context"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "persistentvolume-protection-controller"

// Finalizer is the finalizer that protects a bound volume. Mirrors
// volumeutil.PVProtectionFinalizer.
const Finalizer = "kubernetes.io/pv-protection"

// Controller is the PV protection controller.
type Controller struct {
	client  kubernetes.Interface
	volumes corelisters.PersistentVolumeLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	log     *slog.Logger
}

// New builds the controller over the factory's PersistentVolume informer.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface) *Controller {
	pvInformer := factory.Core().V1().PersistentVolumes()
	c := &Controller{
		client:  client,
		volumes: pvInformer.Lister(),
		synced:  pvInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pvprotection"}),
		log: slog.With("controller", Name),
	}
	enqueue := func(obj interface{}) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && needsWork(pv) {
			c.queue.Add(pv.Name)
		}
	}
	_, _ = pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	return c
}

// Run waits for the cache, then syncs volumes until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "persistent volume protection", c.queue, []cache.InformerSynced{c.synced}, workers, c.log, c.sync)
}

// needsWork: a volume without the finalizer, or one being deleted that has it.
func needsWork(pv *corev1.PersistentVolume) bool {
	has := slices.Contains(pv.Finalizers, Finalizer)
	return (pv.DeletionTimestamp == nil && !has) || (pv.DeletionTimestamp != nil && has)
}

// sync adds the finalizer to a live volume and removes it from a volume being deleted
// that is not Bound. Mirrors processPV.
func (c *Controller) sync(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(pv.Finalizers, Finalizer)
	switch {
	case pv.DeletionTimestamp == nil && !has:
		pv = pv.DeepCopy()
		pv.Finalizers = append(pv.Finalizers, Finalizer)
	case pv.DeletionTimestamp != nil && has && pv.Status.Phase != corev1.VolumeBound:
		pv = pv.DeepCopy()
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == Finalizer })
	default:
		return nil
	}
	_, err = c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
