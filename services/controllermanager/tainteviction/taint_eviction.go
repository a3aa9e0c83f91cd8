// Package tainteviction is kube's taint eviction controller (the NoExecuteTaintManager):
// a pod on a node with a NoExecute taint it does not tolerate is deleted at once; one
// that tolerates it for tolerationSeconds is deleted when that time has passed, unless
// the taint goes first. Mirrors k8s.io/kubernetes/pkg/controller/tainteviction.
package tainteviction

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/nodepods"
)

// workers is how many goroutines handle updates and deletions (kube's UpdateWorkerSize).
const workers = 8

// update is a node or pod whose NoExecute situation may have changed.
type update struct {
	node string               // set for a node update
	pod  types.NamespacedName // set for a pod update
}

// Controller is the taint eviction controller.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	clock    clock.WithTickerAndDelayedExecution
	log      *slog.Logger

	nodeLister  corelisters.NodeLister
	podLister   corelisters.PodLister
	podIndexer  cache.Indexer
	cacheSynced []cache.InformerSynced

	// mu guards taintedNodes and makes each pod's decision atomic.
	mu           sync.Mutex
	taintedNodes map[string][]v1.Taint // NoExecute taints by node

	updates            workqueue.TypedInterface[update]
	taintEvictionQueue *TimedWorkerQueue
	deletions          workqueue.TypedRateLimitingInterface[types.NamespacedName]
	podDeletions       prometheus.Counter
}

// New builds the controller on the shared informers; Run starts it.
func New(podInformer coreinformers.PodInformer, nodeInformer coreinformers.NodeInformer, client kubernetes.Interface,
	recorder record.EventRecorder, c clock.WithTickerAndDelayedExecution) (*Controller, error) {
	if err := nodepods.AddIndexer(podInformer.Informer()); err != nil {
		return nil, fmt.Errorf("tainteviction: %w", err)
	}
	tc := &Controller{
		client: client, recorder: recorder, clock: c,
		log:          slog.Default().With("controller", "taint-eviction-controller"),
		nodeLister:   nodeInformer.Lister(),
		podLister:    podInformer.Lister(),
		podIndexer:   podInformer.Informer().GetIndexer(),
		cacheSynced:  []cache.InformerSynced{podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
		taintedNodes: map[string][]v1.Taint{},
		updates:      workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[update]{Name: "taint_eviction_controller", Clock: c}),
		deletions: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "taint_eviction_controller_deletions", Clock: c}),
		podDeletions: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "taint_eviction_controller", Name: "pod_deletions_total",
			Help: "Number of pods deleted by the taint eviction controller since its start."}),
	}
	tc.taintEvictionQueue = NewTimedWorkerQueue(func(pod types.NamespacedName) { tc.deletions.Add(pod) }, c)
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tc.podUpdated(nil, obj) },
		UpdateFunc: func(old, obj any) { tc.podUpdated(old, obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			tc.podUpdated(nil, obj)
		},
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tc.nodeUpdated(nil, obj) },
		UpdateFunc: func(old, obj any) { tc.nodeUpdated(old, obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			tc.nodeUpdated(nil, obj)
		},
	}); err != nil {
		return nil, err
	}
	return tc, nil
}

// Metrics is the controller's Prometheus collectors
// (taint_eviction_controller_pod_deletions_total).
func (tc *Controller) Metrics() []prometheus.Collector {
	return []prometheus.Collector{tc.podDeletions}
}

func (tc *Controller) podUpdated(old, obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if o, ok := old.(*v1.Pod); ok && o.Spec.NodeName == pod.Spec.NodeName && apiequality.Semantic.DeepEqual(o.Spec.Tolerations, pod.Spec.Tolerations) {
		return
	}
	tc.updates.Add(update{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}})
}

func (tc *Controller) nodeUpdated(old, obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	if o, ok := old.(*v1.Node); ok && apiequality.Semantic.DeepEqual(noExecuteTaints(o.Spec.Taints), noExecuteTaints(node.Spec.Taints)) {
		return
	}
	tc.updates.Add(update{node: node.Name})
}

// Run waits for the caches, then handles updates and deletions until ctx ends.
func (tc *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	tc.log.Info("starting")
	defer tc.log.Info("stopped")
	if !cache.WaitForNamedCacheSync("taint-eviction-controller", ctx.Done(), tc.cacheSynced...) {
		tc.updates.ShutDown()
		tc.deletions.ShutDown()
		return
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, tc.updateWorker, time.Second) })
		wg.Go(func() { wait.UntilWithContext(ctx, tc.deletionWorker, time.Second) })
	}
	<-ctx.Done()
	tc.updates.ShutDown()
	tc.deletions.ShutDown()
	wg.Wait()
}

func (tc *Controller) updateWorker(ctx context.Context) {
	for {
		u, quit := tc.updates.Get()
		if quit {
			return
		}
		if u.node != "" {
			tc.handleNodeUpdate(u.node)
		} else {
			tc.handlePodUpdate(u.pod)
		}
		tc.updates.Done(u)
	}
}

// handleNodeUpdate records node's NoExecute taints and decides again for each of its
// pods (kube's handleNodeUpdate).
func (tc *Controller) handleNodeUpdate(name string) {
	node, err := tc.nodeLister.Get(name)
	tc.mu.Lock()
	if err != nil {
		delete(tc.taintedNodes, name) // deleted: its pods are podgc's
		tc.mu.Unlock()
		return
	}
	taints := noExecuteTaints(node.Spec.Taints)
	if len(taints) == 0 {
		delete(tc.taintedNodes, name)
	} else {
		tc.taintedNodes[name] = taints
	}
	tc.mu.Unlock()
	pods, err := nodepods.OnNode(tc.podIndexer, name)
	if err != nil {
		tc.log.Error("listing pods of node", "node", name, "err", err)
		return
	}
	now := tc.clock.Now()
	for _, pod := range pods {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if len(taints) == 0 {
			tc.cancelWorkWithEvent(key)
			continue
		}
		tc.processPodOnNode(key, pod.Spec.Tolerations, taints, now)
	}
}

// handlePodUpdate decides for one pod against its node's recorded taints (kube's
// handlePodUpdate).
func (tc *Controller) handlePodUpdate(key types.NamespacedName) {
	pod, err := tc.podLister.Pods(key.Namespace).Get(key.Name)
	if err != nil {
		tc.cancelWorkWithEvent(key)
		return
	}
	if pod.Spec.NodeName == "" {
		return
	}
	tc.mu.Lock()
	taints, ok := tc.taintedNodes[pod.Spec.NodeName]
	tc.mu.Unlock()
	if !ok {
		return
	}
	tc.processPodOnNode(key, pod.Spec.Tolerations, taints, tc.clock.Now())
}

// processPodOnNode schedules, reschedules or cancels the deletion of a pod whose node has
// taints: untolerated → now; tolerated forever → never; else after the smallest
// tolerationSeconds of the tolerations used, counted from when eviction was first
// decided (kube's processPodOnNode).
func (tc *Controller) processPodOnNode(key types.NamespacedName, tolerations []v1.Toleration, taints []v1.Taint, now time.Time) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(taints) == 0 {
		tc.cancelWorkWithEventLocked(key)
		return
	}
	allTolerated, used := getMatchingTolerations(taints, tolerations)
	if !allTolerated {
		tc.log.Info("pod does not tolerate its node's NoExecute taints: deleting it", "pod", key.String())
		tc.cancelWorkWithEventLocked(key)
		tc.emitPodDeletionEvent(key)
		tc.taintEvictionQueue.AddWork(key, now, now)
		return
	}
	minTolerationTime := getMinTolerationTime(used)
	if minTolerationTime < 0 {
		tc.cancelWorkWithEventLocked(key)
		return
	}
	startTime, triggerTime := now, now.Add(minTolerationTime)
	if createdAt, _, ok := tc.taintEvictionQueue.Scheduled(key); ok {
		if createdAt.Add(minTolerationTime).Before(triggerTime) {
			return // decided earlier: its deadline stands
		}
		tc.cancelWorkWithEventLocked(key)
		startTime = createdAt
	}
	tc.emitPodDeletionEvent(key)
	tc.taintEvictionQueue.AddWork(key, startTime, triggerTime)
}

func (tc *Controller) cancelWorkWithEvent(key types.NamespacedName) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.cancelWorkWithEventLocked(key)
}

func (tc *Controller) cancelWorkWithEventLocked(key types.NamespacedName) {
	if tc.taintEvictionQueue.CancelWork(key) {
		tc.recorder.Eventf(podRef(key), v1.EventTypeNormal, "TaintManagerEviction", "Cancelling deletion of Pod %s", key.String())
	}
}

func (tc *Controller) emitPodDeletionEvent(key types.NamespacedName) {
	tc.recorder.Eventf(podRef(key), v1.EventTypeNormal, "TaintManagerEviction", "Marking for deletion Pod %s", key.String())
}

func podRef(key types.NamespacedName) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: key.Namespace, Name: key.Name}
}

func (tc *Controller) deletionWorker(ctx context.Context) {
	for {
		key, quit := tc.deletions.Get()
		if quit {
			return
		}
		if err := tc.addConditionAndDeletePod(ctx, key); err != nil {
			tc.log.Error("evicting pod", "pod", key.String(), "err", err)
			tc.deletions.AddRateLimited(key)
		} else {
			tc.deletions.Forget(key)
		}
		tc.deletions.Done(key)
	}
}

// addConditionAndDeletePod marks the pod DisruptionTarget (DeletionByTaintManager) and
// deletes it, unless it left the tainted node meanwhile (kube's
// addConditionAndDeletePod).
func (tc *Controller) addConditionAndDeletePod(ctx context.Context, key types.NamespacedName) error {
	pods := tc.client.CoreV1().Pods(key.Namespace)
	pod, err := pods.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}
	tc.mu.Lock()
	taints, tainted := tc.taintedNodes[pod.Spec.NodeName]
	tc.mu.Unlock()
	if !tainted {
		return nil // the taint went between the decision and now
	}
	if allTolerated, used := getMatchingTolerations(taints, pod.Spec.Tolerations); allTolerated && getMinTolerationTime(used) < 0 {
		return nil
	}
	if !slices.ContainsFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue
	}) {
		updated := pod.DeepCopy()
		updated.Status.Conditions = append(updated.Status.Conditions, v1.PodCondition{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByTaintManager",
			Message: "Taint manager: deleting due to NoExecute taint", LastTransitionTime: metav1.NewTime(tc.clock.Now()),
		})
		if _, err := pods.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark pod %s DisruptionTarget: %w", key, err)
		}
	}
	err = pods.Delete(ctx, key.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or a new pod of the same name
	}
	if err != nil {
		return err
	}
	tc.podDeletions.Inc()
	tc.log.Info("deleted pod for its node's NoExecute taint", "pod", key.String(), "node", pod.Spec.NodeName)
	return nil
}

// noExecuteTaints are taints' NoExecute ones.
func noExecuteTaints(taints []v1.Taint) []v1.Taint {
	var out []v1.Taint
	for _, t := range taints {
		if t.Effect == v1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

// getMatchingTolerations reports whether tolerations tolerate every taint, and the
// first toleration matching each (kube's v1helper.GetMatchingTolerations).
func getMatchingTolerations(taints []v1.Taint, tolerations []v1.Toleration) (bool, []v1.Toleration) {
	var used []v1.Toleration
	for i := range taints {
		j := slices.IndexFunc(tolerations, func(t v1.Toleration) bool { return t.ToleratesTaint(klog.Background(), &taints[i], false) })
		if j < 0 {
			return false, nil
		}
		used = append(used, tolerations[j])
	}
	return true, used
}

// getMinTolerationTime is the smallest tolerationSeconds of tolerations: 0 for none or a
// non-positive one, -1 (forever) when none sets it.
func getMinTolerationTime(tolerations []v1.Toleration) time.Duration {
	if len(tolerations) == 0 {
		return 0
	}
	minSeconds := int64(math.MaxInt64)
	for _, t := range tolerations {
		if t.TolerationSeconds == nil {
			continue
		}
		if *t.TolerationSeconds <= 0 {
			return 0
		}
		minSeconds = min(minSeconds, *t.TolerationSeconds)
	}
	if minSeconds == math.MaxInt64 {
		return -1
	}
	return time.Duration(minSeconds) * time.Second
}
