// Package pvcprotection is kube-controller-manager's PVC protection controller
// ("persistentvolumeclaim-protection-controller"): every PersistentVolumeClaim carries
// the kubernetes.io/pvc-protection finalizer, and a claim being deleted keeps it while a
// pod that is not finished uses the claim, so the storage is not pulled from under a
// running pod. Mirrors k8s.io/kubernetes/pkg/controller/volume/pvcprotection.
package pvcprotection

import (
	"context"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "persistentvolumeclaim-protection-controller"

// Finalizer is the finalizer that protects a claim in use. Mirrors
// volumeutil.PVCProtectionFinalizer.
const Finalizer = "kubernetes.io/pvc-protection"

// Controller is the PVC protection controller.
type Controller struct {
	client kubernetes.Interface
	claims corelisters.PersistentVolumeClaimLister
	pods   corelisters.PodLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	log    *slog.Logger
}

// New builds the controller over the factory's claim and pod informers.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface) *Controller {
	pvcInformer := factory.Core().V1().PersistentVolumeClaims()
	podInformer := factory.Core().V1().Pods()
	c := &Controller{
		client: client,
		claims: pvcInformer.Lister(),
		pods:   podInformer.Lister(),
		synced: []cache.InformerSynced{pvcInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pvcprotection"}),
		log: slog.With("controller", Name),
	}
	enqueueClaim := func(obj interface{}) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && needsWork(pvc) {
			c.queue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
	_, _ = pvcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueClaim,
		UpdateFunc: func(_, obj interface{}) { enqueueClaim(obj) },
	})
	// A pod that goes away or finishes may free the claims it used.
	enqueuePodClaims := func(obj interface{}) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		for _, name := range ClaimNames(pod) {
			c.queue.Add(pod.Namespace + "/" + name)
		}
	}
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj interface{}) {
			if pod := obj.(*corev1.Pod); isTerminated(pod) {
				enqueuePodClaims(pod)
			}
		},
		DeleteFunc: enqueuePodClaims,
	})
	return c
}

// Run waits for the caches, then syncs claims until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "persistent volume claim protection", c.queue, c.synced, workers, c.log, c.sync)
}

// needsWork: a claim without the finalizer, or one being deleted that has it.
func needsWork(pvc *corev1.PersistentVolumeClaim) bool {
	has := slices.Contains(pvc.Finalizers, Finalizer)
	return (pvc.DeletionTimestamp == nil && !has) || (pvc.DeletionTimestamp != nil && has)
}

// ClaimNames are the claims a pod's volumes name (persistentVolumeClaim volumes, and
// the <pod>-<volume> claims of ephemeral volumes).
func ClaimNames(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			names = append(names, pod.Name+"-"+v.Name)
		}
	}
	return names
}

// isTerminated: the pod is Succeeded or Failed and uses its volumes no more.
func isTerminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// sync adds the finalizer to a live claim, and removes it from a claim being deleted
// that no unfinished pod uses (asked of the cache, then of the apiserver). Mirrors
// processPVC.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := c.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(pvc.Finalizers, Finalizer)
	switch {
	case pvc.DeletionTimestamp == nil && !has:
		pvc = pvc.DeepCopy()
		pvc.Finalizers = append(pvc.Finalizers, Finalizer)
		_, err := c.client.CoreV1().PersistentVolumeClaims(namespace).Update(ctx, pvc, metav1.UpdateOptions{})
		return ignoreNotFound(err)
	case pvc.DeletionTimestamp != nil && has:
		inUse, err := c.inUse(ctx, pvc)
		if err != nil || inUse {
			return err
		}
		pvc = pvc.DeepCopy()
		pvc.Finalizers = slices.DeleteFunc(pvc.Finalizers, func(f string) bool { return f == Finalizer })
		_, err = c.client.CoreV1().PersistentVolumeClaims(namespace).Update(ctx, pvc, metav1.UpdateOptions{})
		return ignoreNotFound(err)
	}
	return nil
}

// inUse reports whether an unfinished pod of the claim's namespace names it: the cache
// first, then a live list, as the cache may not have seen a pod just created.
func (c *Controller) inUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	pods, err := c.pods.Pods(pvc.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	if usesClaim(pods, pvc.Name) {
		return true, nil
	}
	list, err := c.client.CoreV1().Pods(pvc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	live := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		live[i] = &list.Items[i]
	}
	return usesClaim(live, pvc.Name), nil
}

func usesClaim(pods []*corev1.Pod, claim string) bool {
	for _, pod := range pods {
		if !isTerminated(pod) && slices.Contains(ClaimNames(pod), claim) {
			return true
		}
	}
	return false
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
