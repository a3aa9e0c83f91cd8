// Package statefulset is kube-controller-manager's StatefulSet controller: it gives each
// StatefulSet spec.replicas pods with stable identities, <set>-<ordinal> (ordinals from
// spec.ordinals.start), labelled statefulset.kubernetes.io/pod-name,
// apps.kubernetes.io/pod-index and controller-revision-hash, with hostname and subdomain
// (spec.serviceName) so a headless Service gives each a stable DNS name, and, when the
// apiserver serves persistentvolumeclaims, a claim <template>-<set>-<ordinal> per volume
// claim template created before the pod. With podManagementPolicy OrderedReady it
// creates pods in ordinal order, each only once its predecessors are Running and Ready
// (and available minReadySeconds), deletes them highest ordinal first, and halts while
// a pod is unhealthy; with Parallel it acts on all at once. It records the set's pod
// template in ControllerRevisions (status.currentRevision and updateRevision,
// revisionHistoryLimit, collisionCount); the RollingUpdate strategy replaces pods at or
// above the partition from the highest ordinal down, one at a time (or maxUnavailable
// at a time) waiting for readiness, OnDelete only when someone deletes them. Failed
// pods are recreated, orphans adopted and strays released through controller
// references, and status counts replicas, ready, available, current and updated pods.
// Mirrors k8s.io/kubernetes/pkg/controller/statefulset.
package statefulset

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
	"skiff.dev/services/controllermanager/history"
	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/controllermanager/podcontrol"
)

// Name is the controller's name in kube-controller-manager's --controllers list, and
// the component its events are recorded under.
const Name = "statefulset-controller"

// controllerKind is what the controller writes in its pods' and revisions'
// ownerReferences.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Controller is the StatefulSet controller.
type Controller struct {
	client    kubernetes.Interface
	control   *statefulSetControl
	setLister appslisters.StatefulSetLister
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger
}

// New builds the controller over the factory's StatefulSet, Pod and ControllerRevision
// informers; client writes pods, claims, revisions and status, recorder takes the
// events. PersistentVolumeClaims are read and created through client, not an informer,
// so a server that does not serve them does not hold the controller up. Start the
// factory after New. Mirrors NewStatefulSetController.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	setInformer := factory.Apps().V1().StatefulSets()
	podInformer := factory.Core().V1().Pods()
	revInformer := factory.Apps().V1().ControllerRevisions()
	log := slog.With("controller", Name)
	c := &Controller{
		client:    client,
		setLister: setInformer.Lister(),
		podLister: podInformer.Lister(),
		synced: []cache.InformerSynced{setInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			revInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "statefulset"}),
		log: log,
	}
	c.control = &statefulSetControl{
		client:     client,
		setLister:  setInformer.Lister(),
		podControl: NewStatefulPodControl(client, podInformer.Lister(), recorder),
		history:    history.NewHistory(client, revInformer.Lister()),
		log:        log,
	}
	_, _ = setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur interface{}) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	})
	return c
}

// Run waits for the informers' caches, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "statefulset", c.queue, c.synced, workers, c.log, c.sync)
}

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// resolveControllerRef returns the StatefulSet ref names, if it is that very one.
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.StatefulSet {
	if ref.Kind != controllerKind.Kind {
		return nil
	}
	set, err := c.setLister.StatefulSets(namespace).Get(ref.Name)
	if err != nil || set.UID != ref.UID {
		return nil
	}
	return set
}

// setsForPod are the StatefulSets whose selector matches an orphan pod.
func (c *Controller) setsForPod(pod *corev1.Pod) []*appsv1.StatefulSet {
	sets, err := c.setLister.GetPodStatefulSets(pod)
	if err != nil {
		return nil
	}
	if len(sets) > 1 {
		c.log.Warn("user error: more than one StatefulSet is selecting pods", "pod", pod.Namespace+"/"+pod.Name, "labels", pod.Labels)
	}
	return sets
}

func (c *Controller) addPod(obj interface{}) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if set := c.resolveControllerRef(pod.Namespace, ref); set != nil {
			c.enqueue(set)
		}
		return
	}
	for _, set := range c.setsForPod(pod) {
		c.enqueue(set)
	}
}

func (c *Controller) updatePod(old, cur interface{}) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	labelChanged := !apiequality.Semantic.DeepEqual(oldPod.Labels, curPod.Labels)
	oldRef, curRef := metav1.GetControllerOf(oldPod), metav1.GetControllerOf(curPod)
	refChanged := !apiequality.Semantic.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if set := c.resolveControllerRef(oldPod.Namespace, oldRef); set != nil {
			c.enqueue(set)
		}
	}
	if curRef != nil {
		set := c.resolveControllerRef(curPod.Namespace, curRef)
		if set == nil {
			return
		}
		c.enqueue(set)
		// A pod that just became ready turns available minReadySeconds later.
		if !podcontrol.IsReady(oldPod) && podcontrol.IsReady(curPod) && set.Spec.MinReadySeconds > 0 {
			c.queue.AddAfter(set.Namespace+"/"+set.Name, time.Duration(set.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if labelChanged || refChanged {
		for _, set := range c.setsForPod(curPod) {
			c.enqueue(set)
		}
	}
}

func (c *Controller) deletePod(obj interface{}) {
	pod := podcontrol.DeletedPod(obj)
	if pod == nil {
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if set := c.resolveControllerRef(pod.Namespace, ref); set != nil {
			c.enqueue(set)
		}
	}
}

// canAdopt rereads set from the apiserver and fails if it is gone, replaced or being
// deleted, so a stale cache never adopts for a dead set.
func (c *Controller) canAdopt(set *appsv1.StatefulSet) func(ctx context.Context) error {
	return controllerref.RecheckDeletionTimestamp(set.UID, func(ctx context.Context) (metav1.Object, error) {
		return c.client.AppsV1().StatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	})
}

// adoptOrphanRevisions makes set the controller of the revisions its selector matches
// that have none. Mirrors adoptOrphanRevisions.
func (c *Controller) adoptOrphanRevisions(ctx context.Context, set *appsv1.StatefulSet) error {
	revisions, err := c.control.ListRevisions(set)
	if err != nil {
		return err
	}
	var orphans []*appsv1.ControllerRevision
	for _, r := range revisions {
		if metav1.GetControllerOf(r) == nil {
			orphans = append(orphans, r)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	if err := c.canAdopt(set)(ctx); err != nil {
		return fmt.Errorf("can't adopt ControllerRevisions: %v", err)
	}
	return c.control.AdoptOrphanRevisions(ctx, set, orphans)
}

// getPodsForStatefulSet claims set's pods: those it controls or that are orphans its
// selector matches and whose name is <set>-<ordinal>, releasing owned pods that stop
// matching. Pods of every phase are claimed, so failed ones can be recreated. Mirrors
// getPodsForStatefulSet.
func (c *Controller) getPodsForStatefulSet(ctx context.Context, set *appsv1.StatefulSet, selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := c.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &controllerref.Manager{
		Controller: set, Kind: controllerKind, Selector: selector,
		Filter:   func(obj metav1.Object) bool { return isMemberOf(set, obj.(*corev1.Pod)) },
		CanAdopt: c.canAdopt(set),
		Patch: func(ctx context.Context, ns, name string, patch []byte) error {
			_, err := c.client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return controllerref.Claim(ctx, m, pods)
}

// sync reconciles the StatefulSet key names. Mirrors StatefulSetController.sync and
// syncStatefulSet.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	set, err := c.setLister.StatefulSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil // validation keeps bad selectors out; nothing to do with one
	}
	if err := c.adoptOrphanRevisions(ctx, set); err != nil {
		return err
	}
	pods, err := c.getPodsForStatefulSet(ctx, set, selector)
	if err != nil {
		return err
	}
	status, err := c.control.UpdateStatefulSet(ctx, set, pods)
	if err != nil {
		return err
	}
	if set.Spec.MinReadySeconds > 0 && status != nil && status.AvailableReplicas != *set.Spec.Replicas {
		c.queue.AddAfter(key, time.Duration(set.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}
