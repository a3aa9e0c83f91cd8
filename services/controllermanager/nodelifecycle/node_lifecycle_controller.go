// Package nodelifecycle is kube's node lifecycle controller: it watches each node's
// Lease (kube-node-lease) and status, marks a node whose kubelet has gone silent for
// --node-monitor-grace-period as Unknown ("Kubelet stopped posting node status."),
// marks its pods not Ready, and taints it node.kubernetes.io/unreachable (or not-ready)
// — NoSchedule at once, NoExecute at a rate limited per zone, which the taint eviction
// controller turns into pod deletions. When the node comes back the taints go. Mirrors
// k8s.io/kubernetes/pkg/controller/nodelifecycle.
package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/nodepods"
)

// ZoneState is the health of one zone's nodes.
type ZoneState string

// The zone states (kube's stateInitial, stateNormal, stateFullDisruption,
// statePartialDisruption).
const (
	stateInitial           ZoneState = "Initial"
	stateNormal            ZoneState = "Normal"
	stateFullDisruption    ZoneState = "FullDisruption"
	statePartialDisruption ZoneState = "PartialDisruption"
)

const (
	// nodeEvictionPeriod is how often the NoExecute tainting queues are tried.
	nodeEvictionPeriod = 100 * time.Millisecond
	// nodeUpdateWorkers and podUpdateWorkers are kube's worker counts.
	nodeUpdateWorkers = 8
	podUpdateWorkers  = 4
	// retrySleepTime is how long a failed tainting is put back for.
	retrySleepTime = 20 * time.Millisecond
	// labelNodeExcludeDisruption keeps a node out of zone-disruption accounting.
	labelNodeExcludeDisruption = "node.kubernetes.io/exclude-disruption"
)

// Config tunes the controller; see controllermanager.Options for each field's flag.
type Config struct {
	NodeMonitorPeriod           time.Duration
	NodeMonitorGracePeriod      time.Duration
	NodeStartupGracePeriod      time.Duration
	EvictionLimiterQPS          float32
	SecondaryEvictionLimiterQPS float32
	LargeClusterThreshold       int
	UnhealthyZoneThreshold      float32
}

// nodeHealthData is what the controller last observed of a node, stamped with its own
// clock: probeTimestamp is when it last saw the kubelet alive (a new heartbeat or Lease
// renewal), so a skewed kubelet clock cannot fool it.
type nodeHealthData struct {
	probeTimestamp           metav1.Time
	readyTransitionTimestamp metav1.Time
	status                   *v1.NodeStatus
	lease                    *coordv1.Lease
}

// Controller is the node lifecycle controller.
type Controller struct {
	cfg      Config
	client   kubernetes.Interface
	recorder record.EventRecorder
	clock    clock.WithTicker
	log      *slog.Logger
	metrics  *metrics

	nodeLister  corelisters.NodeLister
	leaseLister coordlisters.LeaseLister
	podLister   corelisters.PodLister
	podIndexer  cache.Indexer
	cacheSynced []cache.InformerSynced

	// healthMu guards nodeHealthMap, which the monitor writes and pod workers read.
	healthMu      sync.Mutex
	nodeHealthMap map[string]*nodeHealthData

	// evictorMu guards what monitorNodeHealth and the tainting pass share.
	evictorMu            sync.Mutex
	knownNodeSet         map[string]*v1.Node
	zoneStates           map[string]ZoneState
	zoneNoExecuteTainter map[string]*RateLimitedTimedQueue

	nodeUpdateQueue workqueue.TypedInterface[string]
	podUpdateQueue  workqueue.TypedRateLimitingInterface[podUpdateItem]
}

type podUpdateItem struct{ namespace, name string }

// New builds the controller on the shared informers; Run starts it. Errors: an index
// conflict on the pod informer.
func New(nodeInformer coreinformers.NodeInformer, leaseInformer coordinformers.LeaseInformer, podInformer coreinformers.PodInformer,
	client kubernetes.Interface, recorder record.EventRecorder, c clock.WithTicker, cfg Config) (*Controller, error) {
	if err := nodepods.AddIndexer(podInformer.Informer()); err != nil {
		return nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	nc := &Controller{
		cfg: cfg, client: client, recorder: recorder, clock: c,
		log:                  slog.Default().With("controller", "node-lifecycle-controller"),
		metrics:              newMetrics(),
		nodeLister:           nodeInformer.Lister(),
		leaseLister:          leaseInformer.Lister(),
		podLister:            podInformer.Lister(),
		podIndexer:           podInformer.Informer().GetIndexer(),
		cacheSynced:          []cache.InformerSynced{nodeInformer.Informer().HasSynced, leaseInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		nodeHealthMap:        map[string]*nodeHealthData{},
		knownNodeSet:         map[string]*v1.Node{},
		zoneStates:           map[string]ZoneState{},
		zoneNoExecuteTainter: map[string]*RateLimitedTimedQueue{},
		nodeUpdateQueue:      workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "node_lifecycle_controller", Clock: c}),
		podUpdateQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[podUpdateItem](),
			workqueue.TypedRateLimitingQueueConfig[podUpdateItem]{Name: "node_lifecycle_controller_pods", Clock: c}),
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nc.enqueueNode(obj) },
		UpdateFunc: func(_, obj any) { nc.enqueueNode(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { nc.enqueuePod(obj) },
		UpdateFunc: func(old, obj any) {
			if o, n := old.(*v1.Pod), obj.(*v1.Pod); o.Spec.NodeName != n.Spec.NodeName || podReady(o) != podReady(n) {
				nc.enqueuePod(obj)
			}
		},
	}); err != nil {
		return nil, err
	}
	return nc, nil
}

// Metrics is the controller's Prometheus collectors.
func (nc *Controller) Metrics() []prometheus.Collector { return nc.metrics.collectors() }

func (nc *Controller) enqueueNode(obj any) {
	if node, ok := obj.(*v1.Node); ok {
		nc.nodeUpdateQueue.Add(node.Name)
	}
}

func (nc *Controller) enqueuePod(obj any) {
	if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
		nc.podUpdateQueue.Add(podUpdateItem{pod.Namespace, pod.Name})
	}
}

// Run waits for the caches, then monitors node health every NodeMonitorPeriod, tries
// the NoExecute tainting queues every 100 ms and keeps NoSchedule taints and pod
// readiness in step, until ctx ends.
func (nc *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer nc.nodeUpdateQueue.ShutDown()
	defer nc.podUpdateQueue.ShutDown()
	nc.log.Info("starting")
	defer nc.log.Info("stopped")
	if !cache.WaitForNamedCacheSync("node-lifecycle-controller", ctx.Done(), nc.cacheSynced...) {
		return
	}
	var wg sync.WaitGroup
	for range nodeUpdateWorkers {
		wg.Go(func() { wait.UntilWithContext(ctx, nc.doNodeProcessingPassWorker, time.Second) })
	}
	for range podUpdateWorkers {
		wg.Go(func() { wait.UntilWithContext(ctx, nc.doPodProcessingWorker, time.Second) })
	}
	wg.Go(func() {
		wait.BackoffUntilWithContext(ctx, nc.doNoExecuteTaintingPass, wait.NewJitteredBackoffManager(nodeEvictionPeriod, 0, nc.clock), true)
	})
	wg.Go(func() {
		wait.BackoffUntilWithContext(ctx, func(ctx context.Context) {
			if err := nc.monitorNodeHealth(ctx); err != nil {
				nc.log.Error("monitoring node health", "err", err)
			}
		}, wait.NewJitteredBackoffManager(nc.cfg.NodeMonitorPeriod, 0, nc.clock), true)
	})
	<-ctx.Done()
	nc.nodeUpdateQueue.ShutDown()
	nc.podUpdateQueue.ShutDown()
	wg.Wait()
}

// doNodeProcessingPassWorker keeps each node's NoSchedule taints in step with its
// conditions.
func (nc *Controller) doNodeProcessingPassWorker(ctx context.Context) {
	for {
		name, quit := nc.nodeUpdateQueue.Get()
		if quit {
			return
		}
		if err := nc.doNoScheduleTaintingPass(ctx, name); err != nil {
			nc.log.Error("NoSchedule tainting", "node", name, "err", err)
		}
		nc.nodeUpdateQueue.Done(name)
	}
}

// doNoScheduleTaintingPass makes node name's condition NoSchedule taints match its
// conditions (kube's doNoScheduleTaintingPass).
func (nc *Controller) doNoScheduleTaintingPass(ctx context.Context, name string) error {
	node, err := nc.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	var current []v1.Taint
	for _, t := range node.Spec.Taints {
		if isControllerNoScheduleTaint(t) {
			current = append(current, t)
		}
	}
	add, del := taintSetDiff(noScheduleTaints(node), current)
	if len(add) == 0 && len(del) == 0 {
		return nil
	}
	return swapNodeControllerTaint(ctx, nc.client, nc.clock, add, del, node)
}

func (nc *Controller) doPodProcessingWorker(ctx context.Context) {
	for {
		item, quit := nc.podUpdateQueue.Get()
		if quit {
			return
		}
		if err := nc.processPod(ctx, item); err != nil {
			nc.log.Error("marking pod not ready", "pod", item.namespace+"/"+item.name, "err", err)
			nc.podUpdateQueue.AddRateLimited(item)
		} else {
			nc.podUpdateQueue.Forget(item)
		}
		nc.podUpdateQueue.Done(item)
	}
}

// processPod marks a pod bound to a node that is not Ready as not Ready itself: the
// node's kubelet cannot be trusted to report it (kube's processPod).
func (nc *Controller) processPod(ctx context.Context, item podUpdateItem) error {
	pod, err := nc.podLister.Pods(item.namespace).Get(item.name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	nc.healthMu.Lock()
	health := nc.nodeHealthMap[pod.Spec.NodeName]
	var ready *v1.NodeCondition
	if health != nil {
		ready = getNodeCondition(health.status, v1.NodeReady)
	}
	nc.healthMu.Unlock()
	if ready == nil || ready.Status == v1.ConditionTrue {
		return nil
	}
	// The health map is as old as the last pass (up to --node-monitor-period): a node
	// that registered NotReady and turned Ready since is Ready in its own object, and
	// its pods are not marked (kube reads only the map, so a pod started within a pass
	// of its node's registration was marked NotReady and its kubelet set it back).
	if node, err := nc.nodeLister.Get(pod.Spec.NodeName); err == nil {
		if c := getNodeCondition(&node.Status, v1.NodeReady); c != nil && c.Status == v1.ConditionTrue {
			return nil
		}
	}
	return nc.markPodsNotReady(ctx, []*v1.Pod{pod}, pod.Spec.NodeName)
}

// monitorNodeHealth is one pass over every node: it notices new and deleted nodes, marks
// the silent ones Unknown, queues NoExecute taints, and adapts each zone's tainting
// rate to its health (kube's monitorNodeHealth).
func (nc *Controller) monitorNodeHealth(ctx context.Context) error {
	nodes, err := nc.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	added, deleted, newZoneRepresentatives := nc.classifyNodes(nodes)
	for _, node := range newZoneRepresentatives {
		nc.addPodEvictorForNewZone(node)
	}
	for _, node := range added {
		nc.log.Info("observed a new node", "node", node.Name)
		nc.recordNodeEvent(node, v1.EventTypeNormal, "RegisteredNode", fmt.Sprintf("Registered Node %v in Controller", node.Name))
		nc.evictorMu.Lock()
		nc.knownNodeSet[node.Name] = node
		nc.evictorMu.Unlock()
		nc.addPodEvictorForNewZone(node)
		if err := nc.markNodeAsReachable(ctx, node); err != nil {
			nc.log.Error("removing NoExecute taints of a new node", "node", node.Name, "err", err)
		}
	}
	for _, node := range deleted {
		nc.log.Info("observed a node deletion", "node", node.Name)
		nc.recordNodeEvent(node, v1.EventTypeNormal, "RemovingNode", fmt.Sprintf("Removing Node %v from Controller", node.Name))
		nc.evictorMu.Lock()
		delete(nc.knownNodeSet, node.Name)
		if q := nc.zoneNoExecuteTainter[zoneKey(node)]; q != nil {
			q.Remove(node.Name)
		}
		nc.evictorMu.Unlock()
		nc.healthMu.Lock()
		delete(nc.nodeHealthMap, node.Name)
		nc.healthMu.Unlock()
	}

	zoneToNodeConditions := map[string][]*v1.NodeCondition{}
	var errs []error
	for _, cached := range nodes {
		node := cached.DeepCopy()
		observedReadyCondition, currentReadyCondition, err := nc.tryUpdateNodeHealth(ctx, node)
		if err != nil {
			// kube retries the node a few times; the next pass retries it too.
			errs = append(errs, fmt.Errorf("update health of node %s: %w", node.Name, err))
			continue
		}
		if node.Labels[labelNodeExcludeDisruption] == "" {
			zone := zoneKey(node)
			zoneToNodeConditions[zone] = append(zoneToNodeConditions[zone], currentReadyCondition)
		}
		if currentReadyCondition == nil {
			continue
		}
		nc.processTaintBaseEviction(ctx, node, observedReadyCondition)
		if currentReadyCondition.Status != v1.ConditionTrue && observedReadyCondition.Status == v1.ConditionTrue {
			nc.recordNodeStatusChange(node, "NodeNotReady")
			pods, err := nodepods.OnNode(nc.podIndexer, node.Name)
			if err == nil {
				err = nc.markPodsNotReady(ctx, pods, node.Name)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("mark pods of node %s not ready: %w", node.Name, err))
			}
		}
	}
	nc.handleDisruption(ctx, zoneToNodeConditions, nodes)
	return errors.Join(errs...)
}

// classifyNodes splits nodes against knownNodeSet: added, deleted, and one node of each
// zone that has no tainting queue yet.
func (nc *Controller) classifyNodes(nodes []*v1.Node) (added, deleted, newZoneRepresentatives []*v1.Node) {
	nc.evictorMu.Lock()
	defer nc.evictorMu.Unlock()
	seen := map[string]bool{}
	for _, node := range nodes {
		seen[node.Name] = true
		if _, ok := nc.knownNodeSet[node.Name]; !ok {
			added = append(added, node)
		} else if _, ok := nc.zoneStates[zoneKey(node)]; !ok {
			newZoneRepresentatives = append(newZoneRepresentatives, node)
		}
	}
	for name, node := range nc.knownNodeSet {
		if !seen[name] {
			deleted = append(deleted, node)
		}
	}
	return added, deleted, newZoneRepresentatives
}

func (nc *Controller) addPodEvictorForNewZone(node *v1.Node) {
	nc.evictorMu.Lock()
	defer nc.evictorMu.Unlock()
	zone := zoneKey(node)
	if _, ok := nc.zoneStates[zone]; !ok {
		nc.zoneStates[zone] = stateInitial
		nc.zoneNoExecuteTainter[zone] = NewRateLimitedTimedQueue(nc.cfg.EvictionLimiterQPS, nc.clock)
		nc.metrics.zoneSize.WithLabelValues(zone).Set(0)
	}
}

// tryUpdateNodeHealth decides node's health from its Ready condition and its Lease, both
// timed by the controller's own clock, and when it has been silent longer than the
// grace period sets Ready, MemoryPressure, DiskPressure and PIDPressure to Unknown in the
// apiserver. It returns the Ready condition as observed and as it is now (kube's
// tryUpdateNodeHealth).
func (nc *Controller) tryUpdateNodeHealth(ctx context.Context, node *v1.Node) (observed v1.NodeCondition, current *v1.NodeCondition, err error) {
	now := metav1.NewTime(nc.clock.Now())
	nc.healthMu.Lock()
	health := nc.nodeHealthMap[node.Name]
	nc.healthMu.Unlock()
	defer func() {
		nc.healthMu.Lock()
		nc.nodeHealthMap[node.Name] = health
		nc.healthMu.Unlock()
	}()

	var gracePeriod time.Duration
	current = getNodeCondition(&node.Status, v1.NodeReady)
	if current == nil {
		// The kubelet never posted status: pretend it posted Unknown at creation.
		observed = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown,
			LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: node.CreationTimestamp}
		gracePeriod = nc.cfg.NodeStartupGracePeriod
		if health != nil {
			health.status = &node.Status
		} else {
			health = &nodeHealthData{status: &node.Status, probeTimestamp: node.CreationTimestamp, readyTransitionTimestamp: node.CreationTimestamp}
		}
	} else {
		observed = *current
		gracePeriod = nc.cfg.NodeMonitorGracePeriod
	}

	var saved *v1.NodeCondition
	var savedLease *coordv1.Lease
	if health != nil {
		saved = getNodeCondition(health.status, v1.NodeReady)
		savedLease = health.lease
	}
	switch {
	case health == nil, saved == nil && current != nil, saved != nil && current == nil:
		// First sight of the node (or of its Ready condition): assume it is alive now.
		health = &nodeHealthData{status: &node.Status, probeTimestamp: now, readyTransitionTimestamp: now}
	case saved != nil && current != nil && !saved.LastHeartbeatTime.Equal(&current.LastHeartbeatTime):
		transition := health.readyTransitionTimestamp
		if !saved.LastTransitionTime.Equal(&current.LastTransitionTime) {
			transition = now
		}
		health = &nodeHealthData{status: &node.Status, probeTimestamp: now, readyTransitionTimestamp: transition, lease: savedLease}
	}
	// A renewed Lease is a heartbeat too, and the usual one: the kubelet posts status
	// only when it changes or every few minutes.
	lease, _ := nc.leaseLister.Leases(v1.NamespaceNodeLease).Get(node.Name)
	if lease != nil && lease.Spec.RenewTime != nil &&
		(savedLease == nil || savedLease.Spec.RenewTime == nil || savedLease.Spec.RenewTime.Before(lease.Spec.RenewTime)) {
		health.lease = lease
		health.probeTimestamp = now
	}

	if !now.After(health.probeTimestamp.Add(gracePeriod)) {
		return observed, current, nil
	}
	for _, t := range []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		c := getNodeCondition(&node.Status, t)
		switch {
		case c == nil:
			node.Status.Conditions = append(node.Status.Conditions, v1.NodeCondition{
				Type: t, Status: v1.ConditionUnknown, Reason: "NodeStatusNeverUpdated", Message: "Kubelet never posted node status.",
				LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: now,
			})
		case c.Status != v1.ConditionUnknown:
			c.Status, c.Reason, c.Message, c.LastTransitionTime = v1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", now
		}
	}
	current = getNodeCondition(&node.Status, v1.NodeReady)
	if apiequality.Semantic.DeepEqual(current, &observed) {
		return observed, current, nil
	}
	nc.log.Info("node stopped posting status: marking it Unknown", "node", node.Name, "lastProbe", health.probeTimestamp.Time, "gracePeriod", gracePeriod)
	if _, err := nc.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return observed, current, err
	}
	health = &nodeHealthData{status: &node.Status, probeTimestamp: health.probeTimestamp, readyTransitionTimestamp: now, lease: lease}
	return observed, current, nil
}

// processTaintBaseEviction queues a node whose Ready condition is False or Unknown for
// the matching NoExecute taint (swapping at once between not-ready and unreachable),
// and removes both from a Ready node (kube's processTaintBaseEviction).
func (nc *Controller) processTaintBaseEviction(ctx context.Context, node *v1.Node, observedReady v1.NodeCondition) {
	switch observedReady.Status {
	case v1.ConditionFalse:
		if taintExists(node.Spec.Taints, UnreachableTaintTemplate) {
			if err := swapNodeControllerTaint(ctx, nc.client, nc.clock, []*v1.Taint{NotReadyTaintTemplate}, []*v1.Taint{UnreachableTaintTemplate}, node); err != nil {
				nc.log.Error("swapping unreachable for not-ready", "node", node.Name, "err", err)
			}
		} else if nc.markNodeForTainting(node, v1.ConditionFalse) {
			nc.log.Info("node is NotReady: queued for the not-ready NoExecute taint", "node", node.Name)
		}
	case v1.ConditionUnknown:
		if taintExists(node.Spec.Taints, NotReadyTaintTemplate) {
			if err := swapNodeControllerTaint(ctx, nc.client, nc.clock, []*v1.Taint{UnreachableTaintTemplate}, []*v1.Taint{NotReadyTaintTemplate}, node); err != nil {
				nc.log.Error("swapping not-ready for unreachable", "node", node.Name, "err", err)
			}
		} else if nc.markNodeForTainting(node, v1.ConditionUnknown) {
			nc.log.Info("node is unreachable: queued for the unreachable NoExecute taint", "node", node.Name)
		}
	case v1.ConditionTrue:
		if err := nc.markNodeAsReachable(ctx, node); err != nil {
			nc.log.Error("removing NoExecute taints", "node", node.Name, "err", err)
		}
	}
}

// markNodeForTainting queues node in its zone's tainting queue; false if already queued.
func (nc *Controller) markNodeForTainting(node *v1.Node, status v1.ConditionStatus) bool {
	nc.evictorMu.Lock()
	defer nc.evictorMu.Unlock()
	q := nc.zoneNoExecuteTainter[zoneKey(node)]
	if q == nil {
		return false
	}
	if status == v1.ConditionFalse && !taintExists(node.Spec.Taints, NotReadyTaintTemplate) {
		q.Remove(node.Name)
	}
	if status == v1.ConditionUnknown && !taintExists(node.Spec.Taints, UnreachableTaintTemplate) {
		q.Remove(node.Name)
	}
	return q.Add(node.Name, node.UID)
}

// markNodeAsReachable removes both NoExecute taints and takes node out of its tainting
// queue.
func (nc *Controller) markNodeAsReachable(ctx context.Context, node *v1.Node) error {
	if taintExists(node.Spec.Taints, UnreachableTaintTemplate) || taintExists(node.Spec.Taints, NotReadyTaintTemplate) {
		if err := swapNodeControllerTaint(ctx, nc.client, nc.clock, nil, []*v1.Taint{UnreachableTaintTemplate, NotReadyTaintTemplate}, node); err != nil {
			return err
		}
	}
	nc.evictorMu.Lock()
	defer nc.evictorMu.Unlock()
	if q := nc.zoneNoExecuteTainter[zoneKey(node)]; q != nil {
		q.Remove(node.Name)
	}
	return nil
}

// doNoExecuteTaintingPass taints the due nodes of every zone, each zone at its own rate
// (kube's doNoExecuteTaintingPass).
func (nc *Controller) doNoExecuteTaintingPass(ctx context.Context) {
	nc.evictorMu.Lock()
	queues := make(map[string]*RateLimitedTimedQueue, len(nc.zoneNoExecuteTainter))
	for zone, q := range nc.zoneNoExecuteTainter {
		queues[zone] = q
	}
	nc.evictorMu.Unlock()
	for zone, q := range queues {
		q.Try(func(value TimedValue) (bool, time.Duration) {
			node, err := nc.nodeLister.Get(value.Value)
			if apierrors.IsNotFound(err) {
				return true, 0
			} else if err != nil {
				return false, 50 * time.Millisecond
			}
			ready := getNodeCondition(&node.Status, v1.NodeReady)
			if ready == nil {
				return true, 0
			}
			var add, opposite *v1.Taint
			switch ready.Status {
			case v1.ConditionFalse:
				add, opposite = NotReadyTaintTemplate, UnreachableTaintTemplate
			case v1.ConditionUnknown:
				add, opposite = UnreachableTaintTemplate, NotReadyTaintTemplate
			default:
				return true, 0 // Ready again
			}
			if err := swapNodeControllerTaint(ctx, nc.client, nc.clock, []*v1.Taint{add}, []*v1.Taint{opposite}, node); err != nil {
				nc.log.Error("adding NoExecute taint", "node", node.Name, "err", err)
				return false, retrySleepTime
			}
			nc.metrics.evictions.WithLabelValues(zone).Inc()
			return true, 0
		})
	}
}

// handleDisruption moves each zone between Normal, PartialDisruption and
// FullDisruption and sets its tainting rate: the primary rate when Normal, the
// secondary (or none, in a small cluster) when PartialDisruption, the primary again when
// one zone is fully down — but when every zone is, the fault is more likely the
// controller's than the nodes', so it stops tainting and lifts every NoExecute taint
// (kube's handleDisruption).
func (nc *Controller) handleDisruption(ctx context.Context, zoneToNodeConditions map[string][]*v1.NodeCondition, nodes []*v1.Node) {
	nc.evictorMu.Lock()
	newZoneStates := map[string]ZoneState{}
	allAreFullyDisrupted := true
	for zone, conditions := range zoneToNodeConditions {
		nc.metrics.zoneSize.WithLabelValues(zone).Set(float64(len(conditions)))
		unhealthy, state := nc.computeZoneState(conditions)
		nc.metrics.zoneHealth.WithLabelValues(zone).Set(float64(100*(len(conditions)-unhealthy)) / float64(max(len(conditions), 1)))
		nc.metrics.unhealthyNodes.WithLabelValues(zone).Set(float64(unhealthy))
		if state != stateFullDisruption {
			allAreFullyDisrupted = false
		}
		newZoneStates[zone] = state
		if _, ok := nc.zoneStates[zone]; !ok {
			nc.zoneStates[zone] = stateInitial
		}
	}
	allWasFullyDisrupted := true
	for zone, state := range nc.zoneStates {
		if _, ok := zoneToNodeConditions[zone]; !ok {
			delete(nc.zoneStates, zone)
			nc.metrics.forgetZone(zone)
			continue
		}
		if state != stateFullDisruption {
			allWasFullyDisrupted = false
		}
	}
	if allAreFullyDisrupted && allWasFullyDisrupted {
		nc.evictorMu.Unlock()
		return
	}
	switch {
	case allAreFullyDisrupted:
		nc.log.Info("every node is not Ready: entering master disruption mode, no evictions")
		for zone := range nc.zoneStates {
			nc.zoneNoExecuteTainter[zone].SwapLimiter(0)
			nc.zoneStates[zone] = stateFullDisruption
		}
		nc.evictorMu.Unlock()
		for _, node := range nodes {
			if err := nc.markNodeAsReachable(ctx, node); err != nil {
				nc.log.Error("lifting NoExecute taints in master disruption mode", "node", node.Name, "err", err)
			}
		}
		return
	case allWasFullyDisrupted:
		nc.log.Info("some nodes are Ready: leaving master disruption mode")
		now := metav1.NewTime(nc.clock.Now())
		nc.healthMu.Lock()
		for _, node := range nodes {
			if h := nc.nodeHealthMap[node.Name]; h != nil {
				h.probeTimestamp, h.readyTransitionTimestamp = now, now
			}
		}
		nc.healthMu.Unlock()
		for zone := range nc.zoneStates {
			nc.setLimiterInZone(zone, len(zoneToNodeConditions[zone]), newZoneStates[zone])
			nc.zoneStates[zone] = newZoneStates[zone]
		}
	default:
		for zone, state := range nc.zoneStates {
			if newState := newZoneStates[zone]; newState != state {
				nc.setLimiterInZone(zone, len(zoneToNodeConditions[zone]), newState)
				nc.zoneStates[zone] = newState
			}
		}
	}
	nc.evictorMu.Unlock()
}

// setLimiterInZone sets zone's tainting rate for state; evictorMu is held.
func (nc *Controller) setLimiterInZone(zone string, zoneSize int, state ZoneState) {
	q := nc.zoneNoExecuteTainter[zone]
	switch state {
	case stateNormal, stateFullDisruption:
		q.SwapLimiter(nc.cfg.EvictionLimiterQPS)
	case statePartialDisruption:
		q.SwapLimiter(nc.reducedQPS(zoneSize))
	}
}

// reducedQPS is a partially disrupted zone's rate: the secondary rate in a large
// cluster, none in a small one.
func (nc *Controller) reducedQPS(nodeNum int) float32 {
	if nodeNum > nc.cfg.LargeClusterThreshold {
		return nc.cfg.SecondaryEvictionLimiterQPS
	}
	return 0
}

// computeZoneState counts a zone's not-Ready nodes and names its state: no Ready node
// is FullDisruption; more than two not Ready and at least UnhealthyZoneThreshold of
// them is PartialDisruption (kube's ComputeZoneState).
func (nc *Controller) computeZoneState(conditions []*v1.NodeCondition) (int, ZoneState) {
	ready, notReady := 0, 0
	for _, c := range conditions {
		if c != nil && c.Status == v1.ConditionTrue {
			ready++
		} else {
			notReady++
		}
	}
	switch {
	case ready == 0 && notReady > 0:
		return notReady, stateFullDisruption
	case notReady > 2 && float32(notReady)/float32(notReady+ready) >= nc.cfg.UnhealthyZoneThreshold:
		return notReady, statePartialDisruption
	default:
		return notReady, stateNormal
	}
}

// markPodsNotReady sets the Ready condition of nodeName's pods to False (kube's
// controller.MarkPodsNotReady).
func (nc *Controller) markPodsNotReady(ctx context.Context, pods []*v1.Pod, nodeName string) error {
	var errs []error
	now := metav1.NewTime(nc.clock.Now())
	for _, cached := range pods {
		if cached.Spec.NodeName != nodeName {
			continue
		}
		pod := cached.DeepCopy()
		i := -1
		for j, c := range pod.Status.Conditions {
			if c.Type == v1.PodReady {
				i = j
			}
		}
		if i < 0 || pod.Status.Conditions[i].Status == v1.ConditionFalse {
			continue
		}
		pod.Status.Conditions[i].Status = v1.ConditionFalse
		pod.Status.Conditions[i].LastTransitionTime = now
		if _, err := nc.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
			}
			continue
		}
		nc.recorder.Event(pod, v1.EventTypeWarning, "NodeNotReady", "Node is not ready")
	}
	return errors.Join(errs...)
}

func (nc *Controller) recordNodeEvent(node *v1.Node, eventType, reason, message string) {
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	nc.recorder.Event(ref, eventType, reason, message)
}

// recordNodeStatusChange records the NodeNotReady event kube's controller does.
func (nc *Controller) recordNodeStatusChange(node *v1.Node, newStatus string) {
	nc.recordNodeEvent(node, v1.EventTypeNormal, newStatus, fmt.Sprintf("Node %s status is now: %s", node.Name, newStatus))
}

func getNodeCondition(status *v1.NodeStatus, t v1.NodeConditionType) *v1.NodeCondition {
	if status == nil {
		return nil
	}
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

func podReady(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// zoneKey is a node's failure domain, region and zone from its topology labels ("" when
// unlabelled, one zone for the whole cluster). Mirrors kube's GetZoneKey.
func zoneKey(node *v1.Node) string {
	region, zone := node.Labels[v1.LabelTopologyRegion], node.Labels[v1.LabelTopologyZone]
	if region == "" && zone == "" {
		return ""
	}
	return region + ":\x00:" + zone
}
