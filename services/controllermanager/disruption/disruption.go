// Package disruption is kube-controller-manager's disruption controller: for every
// PodDisruptionBudget it finds the pods its selector picks and the scale of their
// controllers, and writes the budget's status (expectedPods, currentHealthy,
// desiredHealthy, disruptionsAllowed, observedGeneration, the DisruptionAllowed
// condition), which the pods/eviction subresource reads to grant or refuse evictions. It
// forgets the evictions recorded in status.disruptedPods whose pod was not deleted within
// DeletionTimeout, and resets a DisruptionTarget pod condition left behind by an
// eviction that never deleted its pod. Mirrors k8s.io/kubernetes/pkg/controller/disruption.
package disruption

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/controllermanager/podcontrol"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "disruption-controller"

// EventSource is the component kube's disruption controller records its events as.
const EventSource = "controllermanager"

const (
	// DeletionTimeout is how long after an eviction recorded a pod in a budget's
	// status.disruptedPods the pod must be seen being deleted; after it the entry is
	// dropped (the pod counts as healthy again) and a NotDeleted event is recorded.
	DeletionTimeout = 2 * time.Minute

	// StalePodDisruptionTimeout is how long a pod may carry a True DisruptionTarget
	// condition without being deleted before the controller sets it False.
	StalePodDisruptionTimeout = 2 * time.Minute
)

// Controller is the disruption controller.
type Controller struct {
	client    kubernetes.Interface
	mapper    apimeta.RESTMapper
	scales    scaleclient.ScalesGetter
	discovery discovery.DiscoveryInterface

	pdbLister policylisters.PodDisruptionBudgetLister
	podLister corelisters.PodLister
	rcLister  corelisters.ReplicationControllerLister
	rsLister  appslisters.ReplicaSetLister
	dLister   appslisters.DeploymentLister
	synced    []cache.InformerSynced

	// queue holds the keys of budgets to sync; recheckQueue budgets to look at again
	// when an entry of their disruptedPods expires; stalePodDisruptionQueue pods whose
	// DisruptionTarget condition may be stale.
	queue                     workqueue.TypedRateLimitingInterface[string]
	recheckQueue              workqueue.TypedDelayingInterface[string]
	stalePodDisruptionQueue   workqueue.TypedRateLimitingInterface[string]
	stalePodDisruptionTimeout time.Duration

	recorder record.EventRecorder
	clock    clock.WithTicker
	log      *slog.Logger
}

// Config is what New builds the controller from.
type Config struct {
	// Factory gives the informers of pods, budgets, ReplicationControllers,
	// ReplicaSets and Deployments. Start it after New.
	Factory informers.SharedInformerFactory
	// Client writes budgets' status and pods' conditions.
	Client kubernetes.Interface
	// Recorder records the controller's events.
	Recorder record.EventRecorder
	// Mapper, Scales and Discovery find the scale of controllers other than
	// ReplicationControllers, ReplicaSets and Deployments (StatefulSets, custom
	// resources) through their scale subresource; nil Mapper or Scales: pods of such
	// controllers make the budget's sync fail (DisruptionAllowed False, SyncFailed).
	Mapper    apimeta.RESTMapper
	Scales    scaleclient.ScalesGetter
	Discovery discovery.DiscoveryInterface
	// Clock is the controller's time; nil means the real clock.
	Clock clock.WithTicker
	// StalePodDisruptionTimeout overrides StalePodDisruptionTimeout when positive.
	StalePodDisruptionTimeout time.Duration
}

// New builds the disruption controller and registers its informers' handlers. Mirrors
// NewDisruptionController.
func New(cfg Config) *Controller {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	stale := cfg.StalePodDisruptionTimeout
	if stale <= 0 {
		stale = StalePodDisruptionTimeout
	}
	rateLimited := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{
				Name:          name,
				DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Clock: clk, Name: name}),
			})
	}
	pods := cfg.Factory.Core().V1().Pods()
	pdbs := cfg.Factory.Policy().V1().PodDisruptionBudgets()
	rcs := cfg.Factory.Core().V1().ReplicationControllers()
	rss := cfg.Factory.Apps().V1().ReplicaSets()
	ds := cfg.Factory.Apps().V1().Deployments()
	c := &Controller{
		client:                    cfg.Client,
		mapper:                    cfg.Mapper,
		scales:                    cfg.Scales,
		discovery:                 cfg.Discovery,
		pdbLister:                 pdbs.Lister(),
		podLister:                 pods.Lister(),
		rcLister:                  rcs.Lister(),
		rsLister:                  rss.Lister(),
		dLister:                   ds.Lister(),
		queue:                     rateLimited("disruption"),
		recheckQueue:              workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Clock: clk, Name: "disruption_recheck"}),
		stalePodDisruptionQueue:   rateLimited("stale_pod_disruption"),
		stalePodDisruptionTimeout: stale,
		recorder:                  cfg.Recorder,
		clock:                     clk,
		log:                       slog.With("controller", Name),
	}
	c.synced = []cache.InformerSynced{pods.Informer().HasSynced, pdbs.Informer().HasSynced,
		rcs.Informer().HasSynced, rss.Informer().HasSynced, ds.Informer().HasSynced}
	_, _ = pdbs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePDB,
		UpdateFunc: func(_, cur interface{}) { c.enqueuePDB(cur) },
		DeleteFunc: c.enqueuePDB,
	})
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.podChanged,
		UpdateFunc: func(_, cur interface{}) { c.podChanged(cur) },
		DeleteFunc: c.podDeleted,
	})
	return c
}

// Run waits for the informers' caches, then syncs budgets, rechecks them when their
// disrupted pods expire and clears stale DisruptionTarget conditions, one worker each,
// until ctx ends. Mirrors Run.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); worker.Run(ctx, Name, c.queue, c.synced, 1, c.log, c.sync) }()
	go func() {
		defer wg.Done()
		worker.Run(ctx, Name+" stale pod disruption", c.stalePodDisruptionQueue, c.synced, 1, c.log, c.syncStalePodDisruption)
	}()
	go func() {
		defer wg.Done()
		// A budget due for a recheck is synced through the main queue.
		for {
			key, quit := c.recheckQueue.Get()
			if quit {
				return
			}
			c.queue.AddRateLimited(key)
			c.recheckQueue.Done(key)
		}
	}()
	<-ctx.Done()
	c.recheckQueue.ShutDown()
	wg.Wait()
}

func (c *Controller) enqueuePDB(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// podChanged syncs the budget of a pod created or changed, and schedules the cleanup
// of its DisruptionTarget condition if it may go stale.
func (c *Controller) podChanged(obj interface{}) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pdb := c.pdbForPod(pod); pdb != nil {
		c.enqueuePDB(pdb)
	}
	if has, cleanAfter := c.nonTerminatingPodHasStaleDisruptionCondition(pod); has {
		c.stalePodDisruptionQueue.AddAfter(cache.MetaObjectToName(pod).String(), cleanAfter)
	}
}

// podDeleted syncs the budget of a deleted pod.
func (c *Controller) podDeleted(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pdb := c.pdbForPod(pod); pdb != nil {
		c.enqueuePDB(pdb)
	}
}

// pdbForPod returns a budget selecting the pod, nil if none. With several it records a
// MultiplePodDisruptionBudgets warning on the pod and picks the first. Mirrors
// getPdbForPod.
func (c *Controller) pdbForPod(pod *corev1.Pod) *policyv1.PodDisruptionBudget {
	pdbs, err := c.pdbLister.GetPodPodDisruptionBudgets(pod)
	if err != nil || len(pdbs) == 0 {
		return nil
	}
	if len(pdbs) > 1 {
		msg := fmt.Sprintf("Pod %q/%q matches multiple PodDisruptionBudgets.  Chose %q arbitrarily.", pod.Namespace, pod.Name, pdbs[0].Name)
		c.log.Info(msg)
		c.recorder.Event(pod, corev1.EventTypeWarning, "MultiplePodDisruptionBudgets", msg)
	}
	return pdbs[0]
}

// sync computes the status of budget key. A failure other than a conflict sets the
// budget's disruptionsAllowed to 0 with DisruptionAllowed False (SyncFailed), so no
// eviction is granted on a status that cannot be trusted. Mirrors sync.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pdb, err := c.pdbLister.PodDisruptionBudgets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	err = c.trySync(ctx, pdb)
	if err == nil || apierrors.IsConflict(err) {
		return err
	}
	c.log.Error("failed to sync PodDisruptionBudget", "podDisruptionBudget", key, "err", err)
	return c.failSafe(ctx, pdb, err)
}

// trySync computes and writes pdb's status. Mirrors trySync.
func (c *Controller) trySync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	pods, err := c.podsForPDB(pdb)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "NoPods", "Failed to get pods: %v", err)
		return err
	}
	if len(pods) == 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expectedCount, desiredHealthy, unmanagedPods, err := c.expectedPodCount(ctx, pdb, pods)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return err
	}
	if len(unmanagedPods) > 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" "+
			"field of the PDB to an integer value.", pdb.Spec.Selector)
	}
	now := c.clock.Now()
	disruptedPods, recheckTime := c.buildDisruptedPodMap(pods, pdb, now)
	currentHealthy := countHealthyPods(pods, disruptedPods, now)
	err = c.updatePDBStatus(ctx, pdb, currentHealthy, desiredHealthy, expectedCount, disruptedPods)
	if err == nil && recheckTime != nil {
		c.recheckQueue.AddAfter(cache.MetaObjectToName(pdb).String(), recheckTime.Sub(now))
	}
	return err
}

// podsForPDB lists the pods pdb's selector picks in its namespace: none for a nil
// selector, all for an empty one.
func (c *Controller) podsForPDB(pdb *policyv1.PodDisruptionBudget) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, err
	}
	return c.podLister.Pods(pdb.Namespace).List(sel)
}

// expectedPodCount returns how many pods the budget expects and how many must be
// healthy: an integer minAvailable counts the selected pods themselves; a percentage
// minAvailable or any maxUnavailable counts the scale of the pods' controllers (pods
// without a controller are returned as unmanaged and not counted). Mirrors
// getExpectedPodCount.
func (c *Controller) expectedPodCount(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expectedCount, desiredHealthy int32, unmanagedPods []string, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if expectedCount, unmanagedPods, err = c.expectedScale(ctx, pods); err != nil {
			return 0, 0, nil, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expectedCount), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desiredHealthy = max(expectedCount-int32(maxUnavailable), 0)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		desiredHealthy = pdb.Spec.MinAvailable.IntVal
		expectedCount = int32(len(pods))
	case pdb.Spec.MinAvailable != nil:
		if expectedCount, unmanagedPods, err = c.expectedScale(ctx, pods); err != nil {
			return 0, 0, nil, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expectedCount), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desiredHealthy = int32(minAvailable)
	}
	return expectedCount, desiredHealthy, unmanagedPods, nil
}

// controllerAndScale is one controller's UID and desired replicas.
type controllerAndScale struct {
	uid   types.UID
	scale int32
}

// expectedScale sums the desired replicas of the pods' controllers, each counted once.
// An error when a pod's controller cannot be found. Mirrors getExpectedScale.
func (c *Controller) expectedScale(ctx context.Context, pods []*corev1.Pod) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, pod := range pods {
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.Name)
			continue
		}
		if _, found := scales[ref.UID]; found {
			continue
		}
		found := false
		for _, finder := range []func(context.Context, *metav1.OwnerReference, string) (*controllerAndScale, error){
			c.podReplicationController, c.podDeployment, c.podReplicaSet, c.scaleController,
		} {
			cs, err := finder(ctx, ref, pod.Namespace)
			if err != nil {
				return 0, nil, err
			}
			if cs != nil {
				scales[cs.uid] = cs.scale
				found = true
				break
			}
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", pod.Name)
		}
	}
	var expected int32
	for _, n := range scales {
		expected += n
	}
	return expected, unmanaged, nil
}

// isKind reports whether ref names kind in one of groups.
func isKind(ref *metav1.OwnerReference, kind string, groups ...string) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, err
	}
	if ref.Kind != kind {
		return false, nil
	}
	for _, g := range groups {
		if g == gv.Group {
			return true, nil
		}
	}
	return false, nil
}

// podReplicaSet is the ReplicaSet ref names when no Deployment controls it. Mirrors
// getPodReplicaSet.
func (c *Controller) podReplicaSet(_ context.Context, ref *metav1.OwnerReference, namespace string) (*controllerAndScale, error) {
	if ok, err := isKind(ref, "ReplicaSet", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil, nil
	}
	if owner := metav1.GetControllerOf(rs); owner != nil && owner.Kind == "Deployment" {
		return nil, nil
	}
	return &controllerAndScale{rs.UID, replicas(rs.Spec.Replicas)}, nil
}

// podDeployment is the Deployment controlling the ReplicaSet ref names. Mirrors
// getPodDeployment.
func (c *Controller) podDeployment(_ context.Context, ref *metav1.OwnerReference, namespace string) (*controllerAndScale, error) {
	if ok, err := isKind(ref, "ReplicaSet", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil, nil
	}
	owner := metav1.GetControllerOf(rs)
	if owner == nil {
		return nil, nil
	}
	if ok, err := isKind(owner, "Deployment", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	d, err := c.dLister.Deployments(namespace).Get(owner.Name)
	if err != nil || d.UID != owner.UID {
		return nil, nil
	}
	return &controllerAndScale{d.UID, replicas(d.Spec.Replicas)}, nil
}

// podReplicationController is the ReplicationController ref names. Mirrors
// getPodReplicationController.
func (c *Controller) podReplicationController(_ context.Context, ref *metav1.OwnerReference, namespace string) (*controllerAndScale, error) {
	if ok, err := isKind(ref, "ReplicationController", ""); !ok || err != nil {
		return nil, err
	}
	rc, err := c.rcLister.ReplicationControllers(namespace).Get(ref.Name)
	if err != nil || rc.UID != ref.UID {
		return nil, nil
	}
	return &controllerAndScale{rc.UID, replicas(rc.Spec.Replicas)}, nil
}

// scaleController reads the scale subresource of any other controller (StatefulSets,
// custom resources). Errors: the kind is unknown, or served without a scale
// subresource. Mirrors getScaleController.
func (c *Controller) scaleController(ctx context.Context, ref *metav1.OwnerReference, namespace string) (*controllerAndScale, error) {
	if c.mapper == nil || c.scales == nil {
		return nil, nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, err
	}
	mapping, err := c.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return nil, err
	}
	gr := mapping.Resource.GroupResource()
	scale, err := c.scales.Scales(namespace).Get(ctx, gr, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Either the object is gone or its resource has no scale subresource.
		if c.discovery != nil {
			if list, derr := c.discovery.ServerResourcesForGroupVersion(mapping.Resource.GroupVersion().String()); derr == nil {
				for _, r := range list.APIResources {
					if r.Name == mapping.Resource.Resource+"/scale" {
						return nil, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("%s does not implement the scale subresource", gr.String())
	}
	if err != nil {
		return nil, err
	}
	if scale.UID != ref.UID {
		return nil, nil
	}
	return &controllerAndScale{scale.UID, scale.Spec.Replicas}, nil
}

func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// countHealthyPods counts the Ready pods neither being deleted nor recorded as about to
// be (disruptedPods within DeletionTimeout). Mirrors countHealthyPods.
func countHealthyPods(pods []*corev1.Pod, disruptedPods map[string]metav1.Time, now time.Time) int32 {
	var healthy int32
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if t, found := disruptedPods[pod.Name]; found && t.Add(DeletionTimeout).After(now) {
			continue
		}
		if podcontrol.IsReady(pod) {
			healthy++
		}
	}
	return healthy
}

// buildDisruptedPodMap keeps the entries of pdb's disruptedPods whose pod exists, is not
// yet being deleted and was evicted less than DeletionTimeout ago; an older entry gets a
// NotDeleted warning on its pod and is dropped. It returns when the first kept entry
// expires (nil: none kept). Mirrors buildDisruptedPodMap.
func (c *Controller) buildDisruptedPodMap(pods []*corev1.Pod, pdb *policyv1.PodDisruptionBudget, now time.Time) (map[string]metav1.Time, *time.Time) {
	result := map[string]metav1.Time{}
	var recheck *time.Time
	if pdb.Status.DisruptedPods == nil {
		return result, nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		t, found := pdb.Status.DisruptedPods[pod.Name]
		if !found {
			continue
		}
		expectedDeletion := t.Add(DeletionTimeout)
		if expectedDeletion.Before(now) {
			c.log.Info("pod was expected to be deleted but it wasn't, updating PDB", "pod", cache.MetaObjectToName(pod).String(), "podDisruptionBudget", pdb.Name)
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't",
				pdb.Namespace, pdb.Name)
			continue
		}
		if recheck == nil || expectedDeletion.Before(*recheck) {
			recheck = &expectedDeletion
		}
		result[pod.Name] = t
	}
	return result, recheck
}

// failSafe sets pdb's disruptionsAllowed to 0 and its DisruptionAllowed condition False
// with reason SyncFailed and err as message. Mirrors failSafe.
func (c *Controller) failSafe(ctx context.Context, pdb *policyv1.PodDisruptionBudget, err error) error {
	newPDB := pdb.DeepCopy()
	newPDB.Status.DisruptionsAllowed = 0
	if newPDB.Status.Conditions == nil {
		newPDB.Status.Conditions = []metav1.Condition{}
	}
	apimeta.SetStatusCondition(&newPDB.Status.Conditions, metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.SyncFailedReason,
		Message:            err.Error(),
		ObservedGeneration: newPDB.Status.ObservedGeneration,
	})
	return c.writeStatus(ctx, newPDB)
}

// updatePDBStatus writes the computed status unless it is what pdb holds already.
// disruptionsAllowed is currentHealthy - desiredHealthy, but 0 while no pod is expected
// (a budget whose first pods appear before its first sync is safe). Mirrors
// updatePdbStatus.
func (c *Controller) updatePDBStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, currentHealthy, desiredHealthy, expectedCount int32, disruptedPods map[string]metav1.Time) error {
	disruptionsAllowed := currentHealthy - desiredHealthy
	if expectedCount <= 0 || disruptionsAllowed <= 0 {
		disruptionsAllowed = 0
	}
	if pdb.Status.CurrentHealthy == currentHealthy &&
		pdb.Status.DesiredHealthy == desiredHealthy &&
		pdb.Status.ExpectedPods == expectedCount &&
		pdb.Status.DisruptionsAllowed == disruptionsAllowed &&
		apiequality.Semantic.DeepEqual(pdb.Status.DisruptedPods, disruptedPods) &&
		pdb.Status.ObservedGeneration == pdb.Generation &&
		pdbhelper.ConditionsAreUpToDate(pdb) {
		return nil
	}
	newPDB := pdb.DeepCopy()
	newPDB.Status = policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy:     currentHealthy,
		DesiredHealthy:     desiredHealthy,
		ExpectedPods:       expectedCount,
		DisruptionsAllowed: disruptionsAllowed,
		DisruptedPods:      disruptedPods,
		ObservedGeneration: pdb.Generation,
		Conditions:         newPDB.Status.Conditions,
	}
	pdbhelper.UpdateDisruptionAllowedCondition(newPDB)
	return c.writeStatus(ctx, newPDB)
}

// writeStatus writes pdb's status once; a failure is retried through the queue.
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	_, err := c.client.PolicyV1().PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	return err
}

// syncStalePodDisruption sets pod key's DisruptionTarget condition False once it has
// been True for the stale timeout while the pod was not deleted (an eviction that
// never got to delete it). Mirrors syncStalePodDisruption.
func (c *Controller) syncStalePodDisruption(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has, cleanAfter := c.nonTerminatingPodHasStaleDisruptionCondition(pod)
	if !has {
		return nil
	}
	if cleanAfter > 0 {
		return &worker.Requeue{After: cleanAfter}
	}
	newPod := pod.DeepCopy()
	for i := range newPod.Status.Conditions {
		cond := &newPod.Status.Conditions[i]
		if cond.Type == corev1.DisruptionTarget {
			cond.Status = corev1.ConditionFalse
			cond.LastTransitionTime = metav1.NewTime(c.clock.Now())
			cond.Reason, cond.Message = "", ""
		}
	}
	if _, err := c.client.CoreV1().Pods(namespace).UpdateStatus(ctx, newPod, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.log.Info("reset stale DisruptionTarget condition to False", "pod", key)
	return nil
}

// nonTerminatingPodHasStaleDisruptionCondition reports whether the pod carries a True
// DisruptionTarget condition that goes stale (not set by the kubelet, the pod neither
// being deleted nor terminal), and how long until it is stale. Mirrors
// nonTerminatingPodHasStaleDisruptionCondition.
func (c *Controller) nonTerminatingPodHasStaleDisruptionCondition(pod *corev1.Pod) (bool, time.Duration) {
	if pod.DeletionTimestamp != nil {
		return false, 0
	}
	var cond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.DisruptionTarget {
			cond = &pod.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason == corev1.PodReasonTerminationByKubelet ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false, 0
	}
	return true, max(c.stalePodDisruptionTimeout-c.clock.Since(cond.LastTransitionTime.Time), 0)
}
