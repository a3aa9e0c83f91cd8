// Package replicaset is kube-controller-manager's ReplicaSet controller: it keeps
// spec.replicas active pods for every ReplicaSet, creating pods from the template (in
// slow-start batches, each with a controller ownerReference), deleting the surplus in
// kube's order, adopting matching orphans and releasing pods that stop matching, and
// writes status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
// observedGeneration, the ReplicaFailure condition). Through an Adapter the same
// controller runs other kinds seen as ReplicaSets: the replicationcontroller package runs
// it over ReplicationControllers. Mirrors k8s.io/kubernetes/pkg/controller/replicaset.
package replicaset

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/expectations"
	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/controllermanager/podcontrol"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "replicaset-controller"

// BurstReplicas caps the pods one sync creates or deletes. Mirrors BurstReplicas.
const BurstReplicas = 500

// Adapter is how the controller reads and writes the objects it manages, seen as apps/v1
// ReplicaSets: the ReplicaSet controller's is the apps/v1 API itself, the replication
// controller's converts ReplicationControllers. It is the narrow form of the informer,
// lister and clientset adapters through which kube runs this controller over
// ReplicationControllers (pkg/controller/replication/conversion.go).
type Adapter interface {
	// Kind is the managed kind, named by the controller references of its pods.
	Kind() schema.GroupVersionKind
	// AddEventHandler registers handler with the objects' informer; the handler receives
	// *appsv1.ReplicaSet, or a cache.DeletedFinalStateUnknown holding one.
	AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	// HasSynced reports whether the informer has listed every object.
	HasSynced() bool
	// Get returns the cached object namespace/name; a NotFound error if there is none.
	// The result is shared with the cache: copy before changing it.
	Get(namespace, name string) (*appsv1.ReplicaSet, error)
	// List returns the cached objects of namespace, shared with the cache as Get's.
	List(namespace string) ([]*appsv1.ReplicaSet, error)
	// Fetch reads namespace/name from the apiserver, past the cache (adoption's recheck).
	Fetch(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error)
	// UpdateStatus writes rs's status through the status subresource and returns what was
	// stored. Errors are the apiserver's (409 Conflict on a stale resourceVersion).
	UpdateStatus(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error)
	// EventObject is the object the events about rs are recorded on: the object rs
	// stands for.
	EventObject(rs *appsv1.ReplicaSet) runtime.Object
}

// Controller is the ReplicaSet controller.
type Controller struct {
	client       kubernetes.Interface
	podControl   podcontrol.PodControl
	adapter      Adapter
	kind         schema.GroupVersionKind
	podLister    corelisters.PodLister
	synced       []cache.InformerSynced
	expectations *expectations.Expectations
	queueName    string
	queue        workqueue.TypedRateLimitingInterface[string]
	log          *slog.Logger
}

// New builds the ReplicaSet controller over the factory's ReplicaSet and Pod informers.
// Start the factory after New and before (or while) Run waits for the caches.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	return NewBaseController(replicaSets{informer: factory.Apps().V1().ReplicaSets(), client: client},
		factory.Core().V1().Pods(), client, recorder, Name, "replicaset")
}

// NewBaseController builds the controller over adapter's objects and podInformer's pods:
// name labels its logs, queueName its work queue and the queue's metrics. client creates,
// patches and deletes pods; recorder records SuccessfulCreate, SuccessfulDelete and their
// failures on adapter.EventObject. Mirrors NewBaseController.
func NewBaseController(adapter Adapter, podInformer coreinformers.PodInformer, client kubernetes.Interface, recorder record.EventRecorder, name, queueName string) *Controller {
	c := &Controller{
		client:       client,
		podControl:   podcontrol.PodControl{Client: client, Recorder: recorder},
		adapter:      adapter,
		kind:         adapter.Kind(),
		podLister:    podInformer.Lister(),
		synced:       []cache.InformerSynced{adapter.HasSynced, podInformer.Informer().HasSynced},
		expectations: expectations.New(),
		queueName:    queueName,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName}),
		log: slog.With("controller", name),
	}
	_, _ = adapter.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
		DeleteFunc: c.deleteRS,
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
	worker.Run(ctx, c.queueName, c.queue, c.synced, workers, c.log, c.syncReplicaSet)
}

// replicaSets is the Adapter of apps/v1 ReplicaSets.
type replicaSets struct {
	informer appsinformers.ReplicaSetInformer
	client   kubernetes.Interface
}

func (replicaSets) Kind() schema.GroupVersionKind {
	return appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
}

func (a replicaSets) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return a.informer.Informer().AddEventHandler(h)
}

func (a replicaSets) HasSynced() bool { return a.informer.Informer().HasSynced() }

func (a replicaSets) Get(namespace, name string) (*appsv1.ReplicaSet, error) {
	return a.informer.Lister().ReplicaSets(namespace).Get(name)
}

func (a replicaSets) List(namespace string) ([]*appsv1.ReplicaSet, error) {
	return a.informer.Lister().ReplicaSets(namespace).List(labels.Everything())
}

func (a replicaSets) Fetch(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error) {
	return a.client.AppsV1().ReplicaSets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a replicaSets) UpdateStatus(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
	return a.client.AppsV1().ReplicaSets(rs.Namespace).UpdateStatus(ctx, rs, metav1.UpdateOptions{})
}

func (replicaSets) EventObject(rs *appsv1.ReplicaSet) runtime.Object { return rs }

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func (c *Controller) deleteRS(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.expectations.Delete(key)
	c.queue.Add(key)
}

// resolveControllerRef returns the ReplicaSet ref points at, if it is that very one.
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	if ref == nil || ref.Kind != c.kind.Kind || ref.APIVersion != c.kind.GroupVersion().String() {
		return nil
	}
	rs, err := c.adapter.Get(namespace, ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil
	}
	return rs
}

// replicaSetsSelecting returns the ReplicaSets whose selector matches an orphan pod.
func (c *Controller) replicaSetsSelecting(pod *corev1.Pod) []*appsv1.ReplicaSet {
	all, err := c.adapter.List(pod.Namespace)
	if err != nil {
		return nil
	}
	var out []*appsv1.ReplicaSet
	for _, rs := range all {
		sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, rs)
		}
	}
	return out
}

func (c *Controller) addPod(obj interface{}) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod) // a restarted controller sees a pod already being deleted
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if rs := c.resolveControllerRef(pod.Namespace, ref); rs != nil {
			key := rs.Namespace + "/" + rs.Name
			c.expectations.CreationObserved(key)
			c.queue.Add(key)
		}
		return
	}
	for _, rs := range c.replicaSetsSelecting(pod) {
		c.enqueue(rs)
	}
}

func (c *Controller) updatePod(old, cur interface{}) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return // periodic resync
	}
	if curPod.DeletionTimestamp != nil && oldPod.DeletionTimestamp == nil {
		// A graceful delete began: count the pod gone now, as kube does, so a
		// replacement starts while it terminates.
		c.deletePod(curPod)
	}
	oldRef, curRef := metav1.GetControllerOf(oldPod), metav1.GetControllerOf(curPod)
	if oldRef != nil && (curRef == nil || oldRef.UID != curRef.UID) {
		if rs := c.resolveControllerRef(oldPod.Namespace, oldRef); rs != nil {
			c.enqueue(rs)
		}
	}
	if curRef != nil {
		if rs := c.resolveControllerRef(curPod.Namespace, curRef); rs != nil {
			c.enqueue(rs)
			// A pod that just became ready turns available minReadySeconds later.
			if !podcontrol.IsReady(oldPod) && podcontrol.IsReady(curPod) && rs.Spec.MinReadySeconds > 0 {
				c.queue.AddAfter(rs.Namespace+"/"+rs.Name, time.Duration(rs.Spec.MinReadySeconds)*time.Second+time.Second)
			}
		}
		return
	}
	if !apiequality.Semantic.DeepEqual(oldPod.Labels, curPod.Labels) || oldRef != nil {
		for _, rs := range c.replicaSetsSelecting(curPod) {
			c.enqueue(rs)
		}
	}
}

func (c *Controller) deletePod(obj interface{}) {
	pod := podcontrol.DeletedPod(obj)
	if pod == nil {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return
	}
	if rs := c.resolveControllerRef(pod.Namespace, ref); rs != nil {
		key := rs.Namespace + "/" + rs.Name
		c.expectations.DeletionObserved(key, podcontrol.Key(pod))
		c.queue.Add(key)
	}
}

// syncReplicaSet brings one ReplicaSet to its desired pods and writes its status.
// Mirrors ReplicaSetController.syncReplicaSet.
func (c *Controller) syncReplicaSet(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	rs, err := c.adapter.Get(namespace, name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsSync := c.expectations.Satisfied(key)
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return nil // validation keeps bad selectors out; nothing to do with one
	}
	all, err := c.podLister.Pods(namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	var active []*corev1.Pod
	for _, p := range all {
		if podcontrol.IsActive(p) {
			active = append(active, p)
		}
	}
	m := &controllerref.Manager{
		Controller: rs, Kind: c.kind, Selector: selector,
		CanAdopt: controllerref.RecheckDeletionTimestamp(rs.UID, func(ctx context.Context) (metav1.Object, error) {
			return c.adapter.Fetch(ctx, namespace, name)
		}),
		Patch: func(ctx context.Context, ns, n string, patch []byte) error {
			_, err := c.client.CoreV1().Pods(ns).Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	pods, claimErr := controllerref.Claim(ctx, m, active)

	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil && claimErr == nil {
		manageErr = c.manageReplicas(ctx, pods, rs, key)
	}
	newStatus := calculateStatus(rs, pods, manageErr, time.Now())
	updated, err := c.updateStatus(ctx, rs, newStatus)
	if err != nil {
		return err
	}
	if manageErr == nil && claimErr == nil && updated.Spec.MinReadySeconds > 0 &&
		updated.Status.ReadyReplicas == ptr.Deref(updated.Spec.Replicas, 0) &&
		updated.Status.AvailableReplicas != ptr.Deref(updated.Spec.Replicas, 0) {
		c.queue.AddAfter(key, time.Duration(updated.Spec.MinReadySeconds)*time.Second)
	}
	if claimErr != nil {
		return claimErr
	}
	return manageErr
}

// manageReplicas creates or deletes pods so len(pods) moves towards spec.replicas, at
// most BurstReplicas per sync. Mirrors manageReplicas.
func (c *Controller) manageReplicas(ctx context.Context, pods []*corev1.Pod, rs *appsv1.ReplicaSet, key string) error {
	diff := len(pods) - int(ptr.Deref(rs.Spec.Replicas, 0))
	switch {
	case diff < 0:
		diff = min(-diff, BurstReplicas)
		c.expectations.ExpectCreations(key, diff)
		ref := controllerref.NewControllerRef(rs, c.kind)
		owner := c.adapter.EventObject(rs)
		successes, err := podcontrol.SlowStartBatch(diff, podcontrol.SlowStartInitialBatchSize, func() error {
			_, err := c.podControl.CreatePod(ctx, rs.Namespace, podcontrol.PodFromTemplate(&rs.Spec.Template, rs.Name, ref), owner)
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going away; nothing will be created
			}
			return err
		})
		// Creations that were skipped or failed will never be observed.
		for i := successes; i < diff; i++ {
			c.expectations.CreationObserved(key)
		}
		return err
	case diff > 0:
		diff = min(diff, BurstReplicas)
		related := c.relatedPods(rs, pods)
		victims := podsToDelete(pods, related, diff)
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = podcontrol.Key(p)
		}
		c.expectations.ExpectDeletions(key, keys)
		owner := c.adapter.EventObject(rs)
		errCh := make(chan error, len(victims))
		var wg sync.WaitGroup
		for _, p := range victims {
			wg.Add(1)
			go func(p *corev1.Pod) {
				defer wg.Done()
				if err := c.podControl.DeletePod(ctx, p, owner); err != nil {
					c.expectations.DeletionObserved(key, podcontrol.Key(p))
					if !apierrors.IsNotFound(err) {
						errCh <- err
					}
				}
			}(p)
		}
		wg.Wait()
		select {
		case err := <-errCh:
			return err
		default:
		}
	}
	return nil
}

// relatedPods are the active pods of every ReplicaSet with the same controller owner as
// rs (the ReplicaSets of one Deployment), or rs's own when it has no owner. Mirrors
// getIndirectlyRelatedPods.
func (c *Controller) relatedPods(rs *appsv1.ReplicaSet, own []*corev1.Pod) []*corev1.Pod {
	owner := metav1.GetControllerOf(rs)
	if owner == nil {
		return own
	}
	siblings := map[types.UID]bool{}
	all, _ := c.adapter.List(rs.Namespace)
	for _, other := range all {
		if ref := metav1.GetControllerOf(other); ref != nil && ref.UID == owner.UID {
			siblings[other.UID] = true
		}
	}
	pods, _ := c.podLister.Pods(rs.Namespace).List(labels.Everything())
	var related []*corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil && siblings[ref.UID] && podcontrol.IsActive(p) {
			related = append(related, p)
		}
	}
	return related
}

// podsToDelete picks the diff pods to delete first. Mirrors getPodsToDelete.
func podsToDelete(pods, related []*corev1.Pod, diff int) []*corev1.Pod {
	if diff < len(pods) {
		pods = append([]*corev1.Pod(nil), pods...)
		sort.Sort(podcontrol.RankedForDeletion{Pods: pods, Ranks: podcontrol.RanksBySameNode(pods, related), Now: time.Now()})
	}
	return pods[:diff]
}

// calculateStatus counts the claimed pods. Mirrors calculateStatus.
func calculateStatus(rs *appsv1.ReplicaSet, pods []*corev1.Pod, manageErr error, now time.Time) appsv1.ReplicaSetStatus {
	status := *rs.Status.DeepCopy()
	templateLabels := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	var fullyLabeled, ready, available int32
	for _, p := range pods {
		if templateLabels.Matches(labels.Set(p.Labels)) {
			fullyLabeled++
		}
		if podcontrol.IsReady(p) {
			ready++
			if podcontrol.IsAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	failure := -1
	for i, cond := range status.Conditions {
		if cond.Type == appsv1.ReplicaSetReplicaFailure {
			failure = i
		}
	}
	switch {
	case manageErr != nil && failure < 0:
		reason := "FailedCreate"
		if len(pods) > int(ptr.Deref(rs.Spec.Replicas, 0)) {
			reason = "FailedDelete"
		}
		status.Conditions = append(status.Conditions, appsv1.ReplicaSetCondition{
			Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: manageErr.Error(),
		})
	case manageErr == nil && failure >= 0:
		status.Conditions = append(status.Conditions[:failure], status.Conditions[failure+1:]...)
	}
	status.Replicas = int32(len(pods))
	status.FullyLabeledReplicas = fullyLabeled
	status.ReadyReplicas = ready
	status.AvailableReplicas = available
	return status
}

// updateStatus writes status (and observedGeneration) through the status subresource
// when it changed, retrying once on a conflict with a fresh read. Mirrors
// updateReplicaSetStatus.
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, status appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	status.ObservedGeneration = rs.Generation
	if apiequality.Semantic.DeepEqual(rs.Status, status) {
		return rs, nil
	}
	var lastErr error
	for i := 0; i < 2; i++ {
		cp := rs.DeepCopy()
		status.ObservedGeneration = rs.Generation
		cp.Status = status
		updated, err := c.adapter.UpdateStatus(ctx, cp)
		if err == nil {
			return updated, nil
		}
		lastErr = err
		if rs, err = c.adapter.Fetch(ctx, rs.Namespace, rs.Name); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("update status of %s %s/%s: %w", c.kind.Kind, rs.Namespace, rs.Name, lastErr)
}
