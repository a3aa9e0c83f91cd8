// Package daemon is kube-controller-manager's DaemonSet controller: for every DaemonSet
// it runs one pod on each node the pod's template fits (nodeSelector, required node
// affinity, taints it tolerates), a node added or relabelled later included, and none
// elsewhere. Each pod is created with a node affinity naming its node, so the scheduler
// places it, and with the tolerations daemon pods always get. Failed pods are killed and
// recreated with a per-node backoff. The pod template's revisions are recorded as
// ControllerRevisions (kubectl rollout history and undo read them); a template change
// rolls out by RollingUpdate (within maxUnavailable, or by surging within maxSurge) or,
// with OnDelete, as pods are deleted by hand. Status counts the nodes: desired, current,
// misscheduled, ready, available (ready for minReadySeconds), unavailable and updated.
// Mirrors k8s.io/kubernetes/pkg/controller/daemon (daemon_controller.go, update.go).
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/expectations"
	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/controllermanager/podcontrol"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "daemonset-controller"

// EventSource is the component the controller's events are recorded under, kube's.
const EventSource = "daemonset-controller"

const (
	// BurstReplicas caps the pods one sync creates and the pods it deletes. Kube's.
	BurstReplicas = 250
	// StatusUpdateRetries is how many times a conflicting status write is retried
	// with a fresh read before the sync fails. Kube's.
	StatusUpdateRetries = 1
	// BackoffGCInterval is how often expired failed-pod backoff entries are dropped.
	BackoffGCInterval = 1 * time.Minute
	// FailedPodsBackoffInitial and FailedPodsBackoffMax bound the delay before a
	// failed daemon pod on a node is killed again: it doubles from the first to the
	// second. Kube-controller-manager's startDaemonSetController values.
	FailedPodsBackoffInitial = 1 * time.Second
	FailedPodsBackoffMax     = 15 * time.Minute
)

// Event reasons on DaemonSets, kube's (pod creates and deletes add podcontrol's
// SuccessfulCreate, FailedCreate, SuccessfulDelete, FailedDelete).
const (
	// SelectingAllReason: the DaemonSet's selector is empty and would select every pod.
	SelectingAllReason = "SelectingAll"
	// FailedPlacementReason: a pod could not be placed on a node.
	FailedPlacementReason = "FailedPlacement"
	// FailedDaemonPodReason: a daemon pod failed and is killed to be recreated.
	FailedDaemonPodReason = "FailedDaemonPod"
	// SucceededDaemonPodReason: a daemon pod exited successfully and is deleted to be
	// recreated.
	SucceededDaemonPodReason = "SucceededDaemonPod"
)

// controllerKind is what the controller references of daemon pods and revisions name.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Controller is the DaemonSet controller. Mirrors DaemonSetsController.
type Controller struct {
	client        kubernetes.Interface
	recorder      record.EventRecorder
	podControl    podcontrol.PodControl
	burstReplicas int
	expectations  *expectations.Expectations

	dsLister      appslisters.DaemonSetLister
	historyLister appslisters.ControllerRevisionLister
	podLister     corelisters.PodLister
	nodeLister    corelisters.NodeLister
	synced        []cache.InformerSynced

	queue             workqueue.TypedRateLimitingInterface[string]
	failedPodsBackoff *flowcontrol.Backoff
	log               *slog.Logger
}

// New builds the controller over the factory's DaemonSet, ControllerRevision, Pod and
// Node informers, with kube's failed-pod backoff (1s doubling to 15m). Start the factory
// after New and before (or while) Run waits for the caches.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	return NewDaemonSetsController(factory.Apps().V1().DaemonSets(), factory.Apps().V1().ControllerRevisions(),
		factory.Core().V1().Pods(), factory.Core().V1().Nodes(), client, recorder,
		flowcontrol.NewBackOff(FailedPodsBackoffInitial, FailedPodsBackoffMax))
}

// NewDaemonSetsController builds the controller over the given informers: client
// creates and deletes pods and writes revisions and status, recorder records events on
// DaemonSets, failedPodsBackoff spaces the killing of failed pods per node (its clock is
// the controller's clock). Mirrors NewDaemonSetsController.
func NewDaemonSetsController(dsInformer appsinformers.DaemonSetInformer, historyInformer appsinformers.ControllerRevisionInformer,
	podInformer coreinformers.PodInformer, nodeInformer coreinformers.NodeInformer, client kubernetes.Interface,
	recorder record.EventRecorder, failedPodsBackoff *flowcontrol.Backoff) *Controller {
	dsc := &Controller{
		client:        client,
		recorder:      recorder,
		podControl:    podcontrol.PodControl{Client: client, Recorder: recorder},
		burstReplicas: BurstReplicas,
		expectations:  expectations.New(),
		dsLister:      dsInformer.Lister(),
		historyLister: historyInformer.Lister(),
		podLister:     podInformer.Lister(),
		nodeLister:    nodeInformer.Lister(),
		synced: []cache.InformerSynced{podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced,
			historyInformer.Informer().HasSynced, dsInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "daemonset"}),
		failedPodsBackoff: failedPodsBackoff,
		log:               slog.With("controller", Name),
	}
	_, _ = dsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { dsc.enqueue(obj) },
		UpdateFunc: dsc.updateDaemonset,
		DeleteFunc: dsc.deleteDaemonset,
	})
	_, _ = historyInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    dsc.addHistory,
		UpdateFunc: dsc.updateHistory,
		DeleteFunc: dsc.deleteHistory,
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    dsc.addPod,
		UpdateFunc: dsc.updatePod,
		DeleteFunc: dsc.deletePod,
	})
	_, _ = nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    dsc.addNode,
		UpdateFunc: dsc.updateNode,
	})
	return dsc
}

// Run waits for the informers' caches, then runs workers until ctx ends, dropping
// expired failed-pod backoff entries every BackoffGCInterval.
func (dsc *Controller) Run(ctx context.Context, workers int) {
	go wait.Until(dsc.failedPodsBackoff.GC, BackoffGCInterval, ctx.Done())
	worker.Run(ctx, "daemon sets", dsc.queue, dsc.synced, workers, dsc.log, dsc.syncDaemonSet)
}

func (dsc *Controller) now() time.Time { return dsc.failedPodsBackoff.Clock.Now() }

func (dsc *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		dsc.queue.Add(key)
	}
}

func (dsc *Controller) enqueueAfter(obj interface{}, after time.Duration) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		dsc.queue.AddAfter(key, after)
	}
}

func (dsc *Controller) updateDaemonset(old, cur interface{}) {
	oldDS, curDS := old.(*appsv1.DaemonSet), cur.(*appsv1.DaemonSet)
	if curDS.UID != oldDS.UID {
		// Deleted and recreated between two watch events: forget the old one.
		if key, err := cache.MetaNamespaceKeyFunc(oldDS); err == nil {
			dsc.deleteDaemonset(cache.DeletedFinalStateUnknown{Key: key, Obj: oldDS})
		}
	}
	dsc.enqueue(curDS)
}

func (dsc *Controller) deleteDaemonset(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	// A DaemonSet created again under this name starts with clean expectations.
	dsc.expectations.Delete(key)
	dsc.queue.Add(key)
}

// resolveControllerRef returns the DaemonSet ref points at, if it is that very one.
func (dsc *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.DaemonSet {
	if ref.Kind != controllerKind.Kind {
		return nil
	}
	ds, err := dsc.dsLister.DaemonSets(namespace).Get(ref.Name)
	if err != nil || ds.UID != ref.UID {
		return nil
	}
	return ds
}

// daemonSetsForPod returns the DaemonSets whose selector matches pod.
func (dsc *Controller) daemonSetsForPod(pod *corev1.Pod) []*appsv1.DaemonSet {
	sets, err := dsc.dsLister.GetPodDaemonSets(pod)
	if err != nil {
		return nil
	}
	if len(sets) > 1 {
		dsc.log.Warn("user error: more than one DaemonSet selects the pod's labels", "pod", pod.Namespace+"/"+pod.Name, "labels", pod.Labels)
	}
	return sets
}

// daemonSetsForHistory returns the DaemonSets whose selector matches a revision.
func (dsc *Controller) daemonSetsForHistory(history *appsv1.ControllerRevision) []*appsv1.DaemonSet {
	sets, err := dsc.dsLister.GetHistoryDaemonSets(history)
	if err != nil {
		return nil
	}
	return sets
}

// addHistory syncs the DaemonSets that may adopt an orphan revision. A revision with a
// controller changes nothing by appearing: its DaemonSet wrote it. Mirrors addHistory.
func (dsc *Controller) addHistory(obj interface{}) {
	history := obj.(*appsv1.ControllerRevision)
	if history.DeletionTimestamp != nil {
		dsc.deleteHistory(history)
		return
	}
	if ref := metav1.GetControllerOf(history); ref != nil {
		return
	}
	for _, ds := range dsc.daemonSetsForHistory(history) {
		dsc.enqueue(ds)
	}
}

// updateHistory syncs the revision's old and new controllers, or, for an orphan whose
// labels or controller changed, the DaemonSets that may adopt it. Mirrors updateHistory.
func (dsc *Controller) updateHistory(old, cur interface{}) {
	oldHistory, curHistory := old.(*appsv1.ControllerRevision), cur.(*appsv1.ControllerRevision)
	if curHistory.ResourceVersion == oldHistory.ResourceVersion {
		return // periodic resync
	}
	curRef, oldRef := metav1.GetControllerOf(curHistory), metav1.GetControllerOf(oldHistory)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if ds := dsc.resolveControllerRef(oldHistory.Namespace, oldRef); ds != nil {
			dsc.enqueue(ds)
		}
	}
	if curRef != nil {
		if ds := dsc.resolveControllerRef(curHistory.Namespace, curRef); ds != nil {
			dsc.enqueue(ds)
		}
		return
	}
	if refChanged || !reflect.DeepEqual(curHistory.Labels, oldHistory.Labels) {
		for _, ds := range dsc.daemonSetsForHistory(curHistory) {
			dsc.enqueue(ds)
		}
	}
}

// deleteHistory syncs the DaemonSet of a deleted revision. Mirrors deleteHistory.
func (dsc *Controller) deleteHistory(obj interface{}) {
	history, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if history, ok = tombstone.Obj.(*appsv1.ControllerRevision); !ok {
			return
		}
	}
	if ref := metav1.GetControllerOf(history); ref != nil {
		if ds := dsc.resolveControllerRef(history.Namespace, ref); ds != nil {
			dsc.enqueue(ds)
		}
	}
}

func (dsc *Controller) addPod(obj interface{}) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		// A restarted controller sees a pod already being deleted: not a creation.
		dsc.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if ds := dsc.resolveControllerRef(pod.Namespace, ref); ds != nil {
			key := ds.Namespace + "/" + ds.Name
			dsc.expectations.CreationObserved(key)
			dsc.queue.Add(key)
		}
		return
	}
	// An orphan: the DaemonSets that select it may adopt it.
	for _, ds := range dsc.daemonSetsForPod(pod) {
		dsc.enqueue(ds)
	}
}

func (dsc *Controller) updatePod(old, cur interface{}) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if curPod.ResourceVersion == oldPod.ResourceVersion {
		return // periodic resync
	}
	if curPod.DeletionTimestamp != nil {
		// A graceful delete began: count the pod gone now, so its replacement is
		// created while it terminates.
		dsc.deletePod(curPod)
		return
	}
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if ds := dsc.resolveControllerRef(oldPod.Namespace, oldRef); ds != nil {
			dsc.enqueue(ds)
		}
	}
	if curRef != nil {
		ds := dsc.resolveControllerRef(curPod.Namespace, curRef)
		if ds == nil {
			return
		}
		dsc.enqueue(ds)
		// A pod that just became ready turns available minReadySeconds later; a second
		// more absorbs the clocks' skew.
		if !podcontrol.IsReady(oldPod) && podcontrol.IsReady(curPod) && ds.Spec.MinReadySeconds > 0 {
			dsc.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if refChanged || !reflect.DeepEqual(curPod.Labels, oldPod.Labels) {
		for _, ds := range dsc.daemonSetsForPod(curPod) {
			dsc.enqueue(ds)
		}
	}
}

func (dsc *Controller) deletePod(obj interface{}) {
	pod := podcontrol.DeletedPod(obj)
	if pod == nil {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return
	}
	if ds := dsc.resolveControllerRef(pod.Namespace, ref); ds != nil {
		key := ds.Namespace + "/" + ds.Name
		dsc.expectations.DeletionObserved(key, podcontrol.Key(pod))
		dsc.queue.Add(key)
	}
}

// addNode syncs the DaemonSets that should run on a new node. Mirrors addNode.
func (dsc *Controller) addNode(obj interface{}) {
	node := obj.(*corev1.Node)
	dsList, err := dsc.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dsList {
		if shouldRun, _ := NodeShouldRunDaemonPod(node, ds); shouldRun {
			dsc.enqueue(ds)
		}
	}
}

// nodeInSameCondition reports whether old and cur have the same conditions True.
func nodeInSameCondition(old, cur []corev1.NodeCondition) bool {
	if len(old) == 0 && len(cur) == 0 {
		return true
	}
	trueInOld := map[corev1.NodeConditionType]bool{}
	for _, c := range old {
		if c.Status == corev1.ConditionTrue {
			trueInOld[c.Type] = true
		}
	}
	for _, c := range cur {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		if !trueInOld[c.Type] {
			return false
		}
		delete(trueInOld, c.Type)
	}
	return len(trueInOld) == 0
}

// shouldIgnoreNodeUpdate is true for a node update that changes only heartbeats: the
// same True conditions and nothing else. Mirrors shouldIgnoreNodeUpdate.
func shouldIgnoreNodeUpdate(oldNode, curNode corev1.Node) bool {
	if !nodeInSameCondition(oldNode.Status.Conditions, curNode.Status.Conditions) {
		return false
	}
	oldNode.ResourceVersion = curNode.ResourceVersion
	oldNode.Status.Conditions = curNode.Status.Conditions
	return apiequality.Semantic.DeepEqual(oldNode, curNode)
}

// updateNode syncs the DaemonSets whose verdict on the node changed (labels, taints,
// conditions). Mirrors updateNode.
func (dsc *Controller) updateNode(old, cur interface{}) {
	oldNode, curNode := old.(*corev1.Node), cur.(*corev1.Node)
	if shouldIgnoreNodeUpdate(*oldNode, *curNode) {
		return
	}
	dsList, err := dsc.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dsList {
		oldShouldRun, oldShouldContinue := NodeShouldRunDaemonPod(oldNode, ds)
		curShouldRun, curShouldContinue := NodeShouldRunDaemonPod(curNode, ds)
		if oldShouldRun != curShouldRun || oldShouldContinue != curShouldContinue {
			dsc.enqueue(ds)
		}
	}
}

// getDaemonPods returns the pods ds owns, adopting matching orphans and releasing owned
// pods that stopped matching. The pods are the cache's: copy before changing them.
// Mirrors getDaemonPods.
func (dsc *Controller) getDaemonPods(ctx context.Context, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	// All pods of the namespace: owned pods that no longer match are released.
	pods, err := dsc.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &controllerref.Manager{
		Controller: ds, Kind: controllerKind, Selector: selector,
		CanAdopt: dsc.recheckDeletionTimestamp(ds),
		Patch: func(ctx context.Context, ns, name string, patch []byte) error {
			_, err := dsc.client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return controllerref.Claim(ctx, m, pods)
}

// recheckDeletionTimestamp reads ds past the cache before the first adoption and
// refuses when it is gone, replaced or being deleted.
func (dsc *Controller) recheckDeletionTimestamp(ds *appsv1.DaemonSet) func(ctx context.Context) error {
	return controllerref.RecheckDeletionTimestamp(ds.UID, func(ctx context.Context) (metav1.Object, error) {
		fresh, err := dsc.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if fresh.UID != ds.UID {
			return nil, fmt.Errorf("original DaemonSet %v/%v is gone: got uid %v, wanted %v", ds.Namespace, ds.Name, fresh.UID, ds.UID)
		}
		return fresh, nil
	})
}

// getNodesToDaemonPods maps node names to the DaemonSet's pods for that node (bound
// there, or with a node affinity naming it). Terminal pods being deleted are left out
// unless includeDeletedTerminal. Mirrors getNodesToDaemonPods.
func (dsc *Controller) getNodesToDaemonPods(ctx context.Context, ds *appsv1.DaemonSet, includeDeletedTerminal bool) (map[string][]*corev1.Pod, error) {
	claimedPods, err := dsc.getDaemonPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	nodeToDaemonPods := map[string][]*corev1.Pod{}
	for _, pod := range claimedPods {
		if !includeDeletedTerminal && isPodTerminal(pod) && pod.DeletionTimestamp != nil {
			// Held by a finalizer or about to go: nothing left to do with it.
			continue
		}
		nodeName, err := GetTargetNodeName(pod)
		if err != nil {
			continue
		}
		nodeToDaemonPods[nodeName] = append(nodeToDaemonPods[nodeName], pod)
	}
	return nodeToDaemonPods, nil
}

func isPodTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// podsShouldBeOnNode decides for one node: whether a pod must be created there, and
// which of the DaemonSet's pods there must go (failed ones, with backoff; succeeded
// ones; all but the oldest when not surging; when surging, all but the oldest old and
// oldest new pod, and the old one too once the new one is available or the old one is
// not ready; every pod when the node should not run one). Mirrors podsShouldBeOnNode.
func (dsc *Controller) podsShouldBeOnNode(node *corev1.Node, nodeToDaemonPods map[string][]*corev1.Pod, ds *appsv1.DaemonSet,
	hash string) (nodesNeedingDaemonPods []string, podsToDelete []*corev1.Pod) {
	shouldRun, shouldContinueRunning := NodeShouldRunDaemonPod(node, ds)
	daemonPods, exists := nodeToDaemonPods[node.Name]

	switch {
	case shouldRun && !exists:
		nodesNeedingDaemonPods = append(nodesNeedingDaemonPods, node.Name)
	case shouldContinueRunning:
		var daemonPodsRunning []*corev1.Pod
		for _, pod := range daemonPods {
			if pod.DeletionTimestamp != nil {
				continue
			}
			switch pod.Status.Phase {
			case corev1.PodFailed:
				// The kubelet may keep rejecting the pod: back off instead of looping hot.
				backoffKey := failedPodsBackoffKey(ds, node.Name)
				now := dsc.now()
				if dsc.failedPodsBackoff.IsInBackOffSinceUpdate(backoffKey, now) {
					delay := dsc.failedPodsBackoff.Get(backoffKey)
					dsc.enqueueAfter(ds, delay)
					continue
				}
				dsc.failedPodsBackoff.Next(backoffKey, now)
				dsc.recorder.Eventf(ds, corev1.EventTypeWarning, FailedDaemonPodReason,
					"Found failed daemon pod %s/%s on node %s, will try to kill it", pod.Namespace, pod.Name, node.Name)
				podsToDelete = append(podsToDelete, pod)
			case corev1.PodSucceeded:
				dsc.recorder.Eventf(ds, corev1.EventTypeNormal, SucceededDaemonPodReason,
					"Found succeeded daemon pod %s/%s on node %s, will try to delete it", pod.Namespace, pod.Name, node.Name)
				podsToDelete = append(podsToDelete, pod)
			default:
				daemonPodsRunning = append(daemonPodsRunning, pod)
			}
		}

		if !AllowsSurge(ds) {
			// One pod per node: keep the oldest. A node left with none gets a new one
			// next sync.
			if len(daemonPodsRunning) <= 1 {
				break
			}
			sort.Sort(podByCreationTimestampAndPhase(daemonPodsRunning))
			podsToDelete = append(podsToDelete, daemonPodsRunning[1:]...)
			break
		}

		if len(daemonPodsRunning) <= 1 {
			if len(daemonPodsRunning) == 0 && shouldRun {
				nodesNeedingDaemonPods = append(nodesNeedingDaemonPods, node.Name)
			}
			break
		}

		// Surging: keep the oldest new pod and, while the new one is not yet
		// available and the old one is ready, the oldest old pod.
		var oldestNewPod, oldestOldPod *corev1.Pod
		sort.Sort(podByCreationTimestampAndPhase(daemonPodsRunning))
		for _, pod := range daemonPodsRunning {
			if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == hash {
				if oldestNewPod == nil {
					oldestNewPod = pod
					continue
				}
			} else if oldestOldPod == nil {
				oldestOldPod = pod
				continue
			}
			podsToDelete = append(podsToDelete, pod)
		}
		if oldestNewPod != nil && oldestOldPod != nil {
			switch {
			case !podcontrol.IsReady(oldestOldPod):
				podsToDelete = append(podsToDelete, oldestOldPod)
			case podcontrol.IsAvailable(oldestNewPod, ds.Spec.MinReadySeconds, dsc.now()):
				podsToDelete = append(podsToDelete, oldestOldPod)
			}
		}

	case !shouldContinueRunning && exists:
		for _, pod := range daemonPods {
			if pod.DeletionTimestamp == nil {
				podsToDelete = append(podsToDelete, pod)
			}
		}
	}
	return nodesNeedingDaemonPods, podsToDelete
}

// updateDaemonSet creates and deletes pods, rolls out a template change and cleans up
// old revisions. Mirrors updateDaemonSet.
func (dsc *Controller) updateDaemonSet(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash, key string, old []*appsv1.ControllerRevision) error {
	if err := dsc.manage(ctx, ds, nodeList, hash); err != nil {
		return err
	}
	// Roll out only once the pods manage created and deleted have been seen.
	if dsc.expectations.Satisfied(key) && ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if err := dsc.rollingUpdate(ctx, ds, nodeList, hash); err != nil {
			return err
		}
	}
	if err := dsc.cleanupHistory(ctx, ds, old); err != nil {
		return fmt.Errorf("failed to clean up revisions of DaemonSet: %w", err)
	}
	return nil
}

// manage creates a pod on each node that should run one and has none, and deletes the
// pods that should not be where they are. Mirrors manage.
func (dsc *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string) error {
	nodeToDaemonPods, err := dsc.getNodesToDaemonPods(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %v", ds.Name, err)
	}
	var nodesNeedingDaemonPods []string
	var podsToDelete []*corev1.Pod
	for _, node := range nodeList {
		create, del := dsc.podsShouldBeOnNode(node, nodeToDaemonPods, ds, hash)
		nodesNeedingDaemonPods = append(nodesNeedingDaemonPods, create...)
		podsToDelete = append(podsToDelete, del...)
	}
	// Unscheduled pods for nodes that are gone would wait forever: the pod garbage
	// collector only removes pods bound to missing nodes.
	podsToDelete = append(podsToDelete, getUnscheduledPodsWithoutNode(nodeList, nodeToDaemonPods)...)
	return dsc.syncNodes(ctx, ds, podsToDelete, nodesNeedingDaemonPods, hash)
}

// syncNodes deletes podsToDelete and creates a pod for each of nodesNeedingDaemonPods,
// at most BurstReplicas of each, creations in slow-start batches. Expectations are set
// first, so the informer's view of the creations and deletions gates the next sync.
// Mirrors syncNodes.
func (dsc *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, podsToDelete []*corev1.Pod, nodesNeedingDaemonPods []string, hash string) error {
	key := ds.Namespace + "/" + ds.Name
	createDiff := min(len(nodesNeedingDaemonPods), dsc.burstReplicas)
	deleteDiff := min(len(podsToDelete), dsc.burstReplicas)
	podsToDelete = podsToDelete[:deleteDiff]
	deleteKeys := make([]string, len(podsToDelete))
	for i, p := range podsToDelete {
		deleteKeys[i] = podcontrol.Key(p)
	}
	dsc.expectations.SetExpectations(key, createDiff, deleteKeys)

	var errsMu sync.Mutex
	var errs []error
	addErr := func(err error) {
		errsMu.Lock()
		defer errsMu.Unlock()
		errs = append(errs, err)
	}

	generation, err := GetTemplateGeneration(ds)
	if err != nil {
		generation = nil
	}
	template := CreatePodTemplate(ds.Spec.Template, generation, hash)
	ref := metav1.NewControllerRef(ds, controllerKind)
	nodes := make(chan string, createDiff)
	for _, n := range nodesNeedingDaemonPods[:createDiff] {
		nodes <- n
	}
	close(nodes)
	_, _ = podcontrol.SlowStartBatch(createDiff, podcontrol.SlowStartInitialBatchSize, func() error {
		nodeName := <-nodes
		podTemplate := template.DeepCopy()
		// The node affinity binds the pod to its node through the scheduler; it cannot
		// conflict with the template's own, which the node satisfies.
		podTemplate.Spec.Affinity = ReplaceDaemonSetPodNodeNameNodeAffinity(podTemplate.Spec.Affinity, nodeName)
		_, err := dsc.podControl.CreatePod(ctx, ds.Namespace, podcontrol.PodFromTemplate(podTemplate, ds.Name, ref), ds)
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going away; nothing will be created
			}
			dsc.expectations.CreationObserved(key)
			addErr(err)
		}
		return err
	})
	// Creations a failed batch left unattempted will never be observed; the next sync
	// retries them.
	for range nodes {
		dsc.expectations.CreationObserved(key)
	}

	var wg sync.WaitGroup
	for _, pod := range podsToDelete {
		wg.Add(1)
		go func(pod *corev1.Pod) {
			defer wg.Done()
			if err := dsc.podControl.DeletePod(ctx, pod, ds); err != nil {
				dsc.expectations.DeletionObserved(key, podcontrol.Key(pod))
				if !apierrors.IsNotFound(err) {
					addErr(err)
				}
			}
		}(pod)
	}
	wg.Wait()
	return utilerrors.NewAggregate(errs)
}

// storeDaemonSetStatus writes the counts through daemonsets/status when they (or the
// observed generation, with updateObservedGen) changed, retrying a failed write
// StatusUpdateRetries times with a fresh read. Mirrors storeDaemonSetStatus.
func (dsc *Controller) storeDaemonSetStatus(ctx context.Context, ds *appsv1.DaemonSet, status appsv1.DaemonSetStatus, updateObservedGen bool) error {
	cur := ds.Status
	if cur.DesiredNumberScheduled == status.DesiredNumberScheduled && cur.CurrentNumberScheduled == status.CurrentNumberScheduled &&
		cur.NumberMisscheduled == status.NumberMisscheduled && cur.NumberReady == status.NumberReady &&
		cur.UpdatedNumberScheduled == status.UpdatedNumberScheduled && cur.NumberAvailable == status.NumberAvailable &&
		cur.NumberUnavailable == status.NumberUnavailable && cur.ObservedGeneration >= ds.Generation {
		return nil
	}
	client := dsc.client.AppsV1().DaemonSets(ds.Namespace)
	toUpdate := ds.DeepCopy()
	var updateErr, getErr error
	for i := 0; ; i++ {
		if updateObservedGen {
			toUpdate.Status.ObservedGeneration = ds.Generation
		}
		toUpdate.Status.DesiredNumberScheduled = status.DesiredNumberScheduled
		toUpdate.Status.CurrentNumberScheduled = status.CurrentNumberScheduled
		toUpdate.Status.NumberMisscheduled = status.NumberMisscheduled
		toUpdate.Status.NumberReady = status.NumberReady
		toUpdate.Status.UpdatedNumberScheduled = status.UpdatedNumberScheduled
		toUpdate.Status.NumberAvailable = status.NumberAvailable
		toUpdate.Status.NumberUnavailable = status.NumberUnavailable
		if _, updateErr = client.UpdateStatus(ctx, toUpdate, metav1.UpdateOptions{}); updateErr == nil {
			return nil
		}
		if i >= StatusUpdateRetries {
			break
		}
		if toUpdate, getErr = client.Get(ctx, ds.Name, metav1.GetOptions{}); getErr != nil {
			return getErr
		}
	}
	return updateErr
}

// updateDaemonSetStatus counts, over the nodes that should run a pod, those that have
// one (current), whose oldest pod is ready and available, and whose oldest pod is from
// the current template (updated); pods on nodes that should not run one are
// misscheduled. Mirrors updateDaemonSetStatus.
func (dsc *Controller) updateDaemonSetStatus(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string, updateObservedGen bool) error {
	nodeToDaemonPods, err := dsc.getNodesToDaemonPods(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %v", ds.Name, err)
	}
	generation, err := GetTemplateGeneration(ds)
	if err != nil {
		generation = nil
	}
	var st appsv1.DaemonSetStatus
	now := dsc.now()
	for _, node := range nodeList {
		shouldRun, _ := NodeShouldRunDaemonPod(node, ds)
		daemonPods := nodeToDaemonPods[node.Name]
		scheduled := len(daemonPods) > 0
		if !shouldRun {
			if scheduled {
				st.NumberMisscheduled++
			}
			continue
		}
		st.DesiredNumberScheduled++
		if !scheduled {
			continue
		}
		st.CurrentNumberScheduled++
		sort.Sort(podByCreationTimestampAndPhase(daemonPods))
		pod := daemonPods[0]
		if podcontrol.IsReady(pod) {
			st.NumberReady++
			if podcontrol.IsAvailable(pod, ds.Spec.MinReadySeconds, now) {
				st.NumberAvailable++
			}
		}
		if IsPodUpdated(pod, hash, generation) {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	if err := dsc.storeDaemonSetStatus(ctx, ds, st, updateObservedGen); err != nil {
		return fmt.Errorf("error storing status for daemon set %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	// Look again once ready pods may have turned available.
	if ds.Spec.MinReadySeconds > 0 && st.NumberReady != st.NumberAvailable {
		dsc.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}

// syncDaemonSet brings one DaemonSet to its nodes and writes its status. Mirrors
// syncDaemonSet.
func (dsc *Controller) syncDaemonSet(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ds, err := dsc.dsLister.DaemonSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		dsc.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to retrieve ds %v from store: %v", key, err)
	}
	nodeList, err := dsc.nodeLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("couldn't get list of nodes when syncing daemon set %s: %v", key, err)
	}
	if reflect.DeepEqual(ds.Spec.Selector, &metav1.LabelSelector{}) {
		dsc.recorder.Eventf(ds, corev1.EventTypeWarning, SelectingAllReason, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	// A DaemonSet being deleted may already have lost its revisions to the garbage
	// collector: its status cannot be computed reliably, so leave it.
	if ds.DeletionTimestamp != nil {
		return nil
	}
	cur, old, err := dsc.constructHistory(ctx, ds)
	if err != nil {
		return fmt.Errorf("failed to construct revisions of DaemonSet: %v", err)
	}
	hash := cur.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]

	if !dsc.expectations.Satisfied(key) {
		// Creations or deletions are still to be seen: write status only, without
		// claiming this generation observed.
		return dsc.updateDaemonSetStatus(ctx, ds, nodeList, hash, false)
	}
	err = dsc.updateDaemonSet(ctx, ds, nodeList, hash, key, old)
	statusErr := dsc.updateDaemonSetStatus(ctx, ds, nodeList, hash, true)
	switch {
	case err != nil && statusErr != nil:
		dsc.log.Warn("failed to update status", "daemonset", key, "err", statusErr)
		return err
	case err != nil:
		return err
	default:
		return statusErr
	}
}

// NodeShouldRunDaemonPod judges a node for a DaemonSet: shouldRun when a new pod
// belongs there (the template's nodeName, if any, is the node; its nodeSelector and
// required node affinity match; the node's NoSchedule and NoExecute taints are
// tolerated, daemon tolerations included); shouldContinueRunning when a pod already
// there may stay (as shouldRun, except that only NoExecute taints count). Mirrors
// NodeShouldRunDaemonPod.
func NodeShouldRunDaemonPod(node *corev1.Node, ds *appsv1.DaemonSet) (shouldRun, shouldContinueRunning bool) {
	pod := NewPod(ds, node.Name)
	if !(ds.Spec.Template.Spec.NodeName == "" || ds.Spec.Template.Spec.NodeName == node.Name) {
		return false, false
	}
	taints := node.Spec.Taints
	fitsNodeName, fitsNodeAffinity, fitsTaints := predicates(pod, node, taints)
	if !fitsNodeName || !fitsNodeAffinity {
		return false, false
	}
	if !fitsTaints {
		// A pod already there stays while it tolerates the NoExecute taints.
		_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoExecute
		}, false)
		return false, !untolerated
	}
	return true, true
}

// predicates checks a daemon pod against a node: its nodeName, its required node
// affinity and nodeSelector, and the node's NoSchedule and NoExecute taints.
func predicates(pod *corev1.Pod, node *corev1.Node, taints []corev1.Taint) (fitsNodeName, fitsNodeAffinity, fitsTaints bool) {
	fitsNodeName = len(pod.Spec.NodeName) == 0 || pod.Spec.NodeName == node.Name
	// Parse errors count as no match, as kube ignores them.
	fitsNodeAffinity, _ = nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, false)
	return fitsNodeName, fitsNodeAffinity, !untolerated
}

// NewPod is the pod the DaemonSet would run on nodeName, daemon tolerations included,
// for judging the node. Mirrors NewPod.
func NewPod(ds *appsv1.DaemonSet, nodeName string) *corev1.Pod {
	newPod := &corev1.Pod{Spec: *ds.Spec.Template.Spec.DeepCopy(), ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy()}
	newPod.Namespace = ds.Namespace
	newPod.Spec.NodeName = nodeName
	AddOrUpdateDaemonPodTolerations(&newPod.Spec)
	return newPod
}

// podByCreationTimestampAndPhase orders scheduled pods first, then oldest first, then
// by name.
type podByCreationTimestampAndPhase []*corev1.Pod

func (o podByCreationTimestampAndPhase) Len() int      { return len(o) }
func (o podByCreationTimestampAndPhase) Swap(i, j int) { o[i], o[j] = o[j], o[i] }
func (o podByCreationTimestampAndPhase) Less(i, j int) bool {
	if (len(o[i].Spec.NodeName) != 0) != (len(o[j].Spec.NodeName) != 0) {
		return len(o[i].Spec.NodeName) != 0
	}
	if o[i].CreationTimestamp.Equal(&o[j].CreationTimestamp) {
		return o[i].Name < o[j].Name
	}
	return o[i].CreationTimestamp.Before(&o[j].CreationTimestamp)
}

// failedPodsBackoffKey keys the failed-pod backoff by DaemonSet, observed generation and
// node: a new generation starts afresh.
func failedPodsBackoffKey(ds *appsv1.DaemonSet, nodeName string) string {
	return fmt.Sprintf("%s/%d/%s", ds.UID, ds.Status.ObservedGeneration, nodeName)
}

// getUnscheduledPodsWithoutNode returns the unbound pods for nodes no longer in
// runningNodesList. Mirrors getUnscheduledPodsWithoutNode.
func getUnscheduledPodsWithoutNode(runningNodesList []*corev1.Node, nodeToDaemonPods map[string][]*corev1.Pod) []*corev1.Pod {
	isNodeRunning := make(map[string]bool, len(runningNodesList))
	for _, node := range runningNodesList {
		isNodeRunning[node.Name] = true
	}
	var results []*corev1.Pod
	for n, pods := range nodeToDaemonPods {
		if isNodeRunning[n] {
			continue
		}
		for _, pod := range pods {
			if len(pod.Spec.NodeName) == 0 {
				results = append(results, pod)
			}
		}
	}
	return results
}
