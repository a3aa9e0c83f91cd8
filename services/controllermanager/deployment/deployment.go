// Package deployment is kube-controller-manager's Deployment controller: it rolls a
// Deployment's pod template out through ReplicaSets (one per template, named
// <deployment>-<pod-template-hash>), with the RollingUpdate strategy (never more than
// replicas+maxSurge pods, never fewer than replicas-maxUnavailable available) or
// Recreate (old pods gone before new ones start); it numbers revisions in the
// deployment.kubernetes.io/revision annotation (a rollback — kubectl rollout undo
// putting an old template back — revives that template's ReplicaSet as the newest
// revision), keeps revisionHistoryLimit old ReplicaSets, honours paused, tracks progress
// against progressDeadlineSeconds (Progressing=False, ProgressDeadlineExceeded) and
// writes status so kubectl rollout status can tell when a rollout is done. Mirrors
// k8s.io/kubernetes/pkg/controller/deployment.
package deployment

import (
	"context"
	"log/slog"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "deployment-controller"

// controllerKind is what the controller writes in its ReplicaSets' ownerReferences.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

// Controller is the Deployment controller.
type Controller struct {
	client    kubernetes.Interface
	recorder  record.EventRecorder
	dLister   appslisters.DeploymentLister
	rsLister  appslisters.ReplicaSetLister
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger
}

// New builds the controller over the factory's Deployment, ReplicaSet and Pod
// informers.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	dInformer := factory.Apps().V1().Deployments()
	rsInformer := factory.Apps().V1().ReplicaSets()
	podInformer := factory.Core().V1().Pods()
	c := &Controller{
		client:    client,
		recorder:  recorder,
		dLister:   dInformer.Lister(),
		rsLister:  rsInformer.Lister(),
		podLister: podInformer.Lister(),
		synced:    []cache.InformerSynced{dInformer.Informer().HasSynced, rsInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "deployment"}),
		log: slog.With("controller", Name),
	}
	_, _ = dInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	_, _ = rsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.addReplicaSet,
		UpdateFunc: func(old, cur interface{}) {
			oldRS, curRS := old.(*appsv1.ReplicaSet), cur.(*appsv1.ReplicaSet)
			if oldRS.ResourceVersion == curRS.ResourceVersion {
				return
			}
			oldRef, curRef := metav1.GetControllerOf(oldRS), metav1.GetControllerOf(curRS)
			if oldRef != nil && (curRef == nil || oldRef.UID != curRef.UID) {
				c.enqueueOwner(oldRS.Namespace, oldRef)
			}
			if curRef != nil {
				c.enqueueOwner(curRS.Namespace, curRef)
				return
			}
			c.enqueueSelecting(curRS)
		},
		DeleteFunc: func(obj interface{}) {
			if rs := replicaSetFrom(obj); rs != nil {
				c.enqueueOwner(rs.Namespace, metav1.GetControllerOf(rs))
			}
		},
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.deletePod})
	return c
}

// Run waits for the informers' caches, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "deployment", c.queue, c.synced, workers, c.log, c.syncDeployment)
}

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func replicaSetFrom(obj interface{}) *appsv1.ReplicaSet {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	rs, _ := obj.(*appsv1.ReplicaSet)
	return rs
}

// enqueueOwner enqueues the Deployment ref points at, if it is that very one.
func (c *Controller) enqueueOwner(namespace string, ref *metav1.OwnerReference) {
	if d := c.resolveControllerRef(namespace, ref); d != nil {
		c.enqueue(d)
	}
}

func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.Deployment {
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return nil
	}
	d, err := c.dLister.Deployments(namespace).Get(ref.Name)
	if err != nil || d.UID != ref.UID {
		return nil
	}
	return d
}

// enqueueSelecting enqueues the Deployments whose selector matches an orphan
// ReplicaSet, so one of them adopts it.
func (c *Controller) enqueueSelecting(rs *appsv1.ReplicaSet) {
	ds, err := c.dLister.Deployments(rs.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, d := range ds {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(rs.Labels)) {
			c.enqueue(d)
		}
	}
}

func (c *Controller) addReplicaSet(obj interface{}) {
	rs := obj.(*appsv1.ReplicaSet)
	if ref := metav1.GetControllerOf(rs); ref != nil {
		c.enqueueOwner(rs.Namespace, ref)
		return
	}
	c.enqueueSelecting(rs)
}

// deletePod wakes a Recreate Deployment waiting for its old pods to go.
func (c *Controller) deletePod(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return
	}
	rs, err := c.rsLister.ReplicaSets(pod.Namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return
	}
	if d := c.resolveControllerRef(rs.Namespace, metav1.GetControllerOf(rs)); d != nil && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		c.enqueue(d)
	}
}

// syncDeployment brings one Deployment's ReplicaSets towards its spec and writes its
// status. Mirrors DeploymentController.syncDeployment.
func (c *Controller) syncDeployment(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.dLister.Deployments(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := cached.DeepCopy()
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || selector.Empty() {
		c.recorder.Eventf(d, corev1.EventTypeWarning, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.")
		return nil
	}
	rsList, err := c.replicaSetsFor(ctx, d, selector)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return c.syncStatusOnly(ctx, d, rsList)
	}
	if err := c.checkPausedConditions(ctx, d); err != nil {
		return err
	}
	if d.Spec.Paused {
		return c.sync(ctx, d, rsList)
	}
	scaling, err := c.isScalingEvent(ctx, d, rsList)
	if err != nil {
		return err
	}
	if scaling {
		return c.sync(ctx, d, rsList)
	}
	switch d.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		return c.rolloutRecreate(ctx, d, rsList, c.podsByReplicaSet(d, rsList))
	default:
		return c.rolloutRolling(ctx, d, rsList)
	}
}

// replicaSetsFor claims the ReplicaSets d owns: its own, plus matching orphans.
// Mirrors getReplicaSetsForDeployment.
func (c *Controller) replicaSetsFor(ctx context.Context, d *appsv1.Deployment, selector labels.Selector) ([]*appsv1.ReplicaSet, error) {
	all, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &controllerref.Manager{
		Controller: d, Kind: controllerKind, Selector: selector,
		CanAdopt: controllerref.RecheckDeletionTimestamp(d.UID, func(ctx context.Context) (metav1.Object, error) {
			return c.client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		}),
		Patch: func(ctx context.Context, ns, n string, patch []byte) error {
			_, err := c.client.AppsV1().ReplicaSets(ns).Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return controllerref.Claim(ctx, m, all)
}

// podsByReplicaSet maps each of d's ReplicaSets (by uid) to its pods. Mirrors
// getPodMapForDeployment.
func (c *Controller) podsByReplicaSet(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) map[types.UID][]*corev1.Pod {
	podMap := make(map[types.UID][]*corev1.Pod, len(rsList))
	for _, rs := range rsList {
		podMap[rs.UID] = nil
	}
	selector, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	pods, err := c.podLister.Pods(d.Namespace).List(selector)
	if err != nil {
		return podMap
	}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			continue
		}
		if _, ok := podMap[ref.UID]; ok {
			podMap[ref.UID] = append(podMap[ref.UID], p)
		}
	}
	return podMap
}
