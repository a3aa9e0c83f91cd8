// Package resourcequota is kube-controller-manager's resource quota controller: it keeps
// every ResourceQuota's status, status.hard a copy of spec.hard and status.used the
// usage its namespace holds, recounted with the same evaluators the ResourceQuota
// admission plugin charges with (skiff.dev/services/internal/quota). A quota is
// recounted when it is created or its spec.hard changes (first, from a priority queue,
// while its status lacks what it limits), when something it counts is deleted or stops
// counting (a pod reaching a terminal phase, a Service changing type: replenishment),
// and in a full resync every resync period. Every namespaced resource discovery lists
// (with create, list, watch and delete) is watched for count/<resource>.<group>, as
// kube's QuotaMonitor does; resources client-go has no informer for (custom
// resources) are not counted. Mirrors k8s.io/kubernetes/pkg/controller/resourcequota.
package resourcequota

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/worker"
	skiffquota "skiff.dev/services/internal/quota"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "resourcequota-controller"

// DefaultResyncPeriod is how often every quota is recounted in full (kube's
// --resource-quota-sync-period default).
const DefaultResyncPeriod = 5 * time.Minute

// discoverySyncPeriod is how often discovery is read again for new resources to count
// (kube's quota monitor resync).
const discoverySyncPeriod = 30 * time.Second

// Controller is the resource quota controller.
type Controller struct {
	client    kubernetes.Interface
	factory   informers.SharedInformerFactory
	discovery discovery.ServerResourcesInterface
	rqLister  corelisters.ResourceQuotaLister
	registry  quota.Registry
	// queue holds quotas to recount; missingUsageQueue those whose status lacks what
	// they limit, served by workers of their own so they are counted promptly.
	queue, missingUsageQueue workqueue.TypedRateLimitingInterface[string]
	resyncPeriod             time.Duration
	clock                    clock.Clock

	mu sync.Mutex
	// monitors are the informers of the resources counted, by group resource, each
	// with its HasSynced.
	monitors map[schema.GroupResource]cache.InformerSynced
	// stop ends the informers syncMonitors starts: Run's context.
	stop <-chan struct{}
	log  *slog.Logger
}

// New builds the controller over factory's informers (ResourceQuotas, and pods,
// services, configmaps, secrets, replicationcontrollers and resourcequotas for the
// evaluators), writing status through client and finding the other resources to count
// through disc (nil: only those). resyncPeriod 0 means DefaultResyncPeriod. Start the
// factory after New, before or while Run waits for the caches. Mirrors
// NewController.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, disc discovery.ServerResourcesInterface, resyncPeriod time.Duration) (*Controller, error) {
	if resyncPeriod <= 0 {
		resyncPeriod = DefaultResyncPeriod
	}
	rqInformer := factory.Core().V1().ResourceQuotas()
	c := &Controller{
		client: client, factory: factory, discovery: disc, rqLister: rqInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resourcequota_primary"}),
		missingUsageQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resourcequota_priority"}),
		resyncPeriod: resyncPeriod,
		clock:        clock.RealClock{},
		monitors:     map[schema.GroupResource]cache.InformerSynced{},
		log:          slog.With("controller", Name),
	}
	listerFor := func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
		inf, err := factory.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		return inf.Lister(), nil
	}
	c.registry = skiffquota.NewRegistry(listerFor, c.clock)
	if _, err := rqInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.addQuota,
		UpdateFunc: func(old, cur interface{}) {
			// Only spec.hard changes are news: status changes are this controller's (or
			// admission's) own; the full resync recounts the rest.
			if quota.Equals(old.(*corev1.ResourceQuota).Spec.Hard, cur.(*corev1.ResourceQuota).Spec.Hard) {
				return
			}
			c.addQuota(cur)
		},
		DeleteFunc: c.enqueueResourceQuota,
	}); err != nil {
		return nil, err
	}
	c.monitors[corev1.Resource("resourcequotas")] = rqInformer.Informer().HasSynced
	for _, e := range c.registry.List() {
		gvr := corev1.SchemeGroupVersion.WithResource(e.GroupResource().Resource)
		if err := c.monitor(gvr); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// monitor watches gvr for replenishment, once: updates that stop an object counting
// (updateFilter) and deletes enqueue the namespace's quotas that count it.
func (c *Controller) monitor(gvr schema.GroupVersionResource) error {
	gr := gvr.GroupResource()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.monitors[gr]; ok && gr != corev1.Resource("resourcequotas") {
		return nil
	}
	inf, err := c.factory.ForResource(gvr)
	if err != nil {
		return err
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur interface{}) {
			if updateFilter(gr, old, cur, c.clock) {
				c.replenishQuota(gr, cur)
			}
		},
		DeleteFunc: func(obj interface{}) { c.replenishQuota(gr, obj) },
	}); err != nil {
		return err
	}
	c.monitors[gr] = inf.Informer().HasSynced
	return nil
}

// updateFilter reports whether an update changes what quota charges the object: a pod
// that stops counting (terminal, or past its deletion grace period), a Service whose
// type changes. Mirrors install.DefaultUpdateFilter.
func updateFilter(gr schema.GroupResource, old, cur interface{}, clk clock.Clock) bool {
	switch gr {
	case corev1.Resource("pods"):
		oldPod, ok1 := old.(*corev1.Pod)
		newPod, ok2 := cur.(*corev1.Pod)
		return ok1 && ok2 && skiffquota.QuotaV1Pod(oldPod, clk) && !skiffquota.QuotaV1Pod(newPod, clk)
	case corev1.Resource("services"):
		oldSvc, ok1 := old.(*corev1.Service)
		newSvc, ok2 := cur.(*corev1.Service)
		return ok1 && ok2 && oldSvc.Spec.Type != newSvc.Spec.Type
	}
	return false
}

// replenishQuota enqueues the quotas of obj's namespace that count gr. Mirrors
// replenishQuota.
func (c *Controller) replenishQuota(gr schema.GroupResource, obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok || m.GetNamespace() == "" {
		return
	}
	evaluator := c.registry.Get(gr)
	if evaluator == nil {
		return
	}
	quotas, err := c.rqLister.ResourceQuotas(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range quotas {
		if len(evaluator.MatchingResources(quota.ResourceNames(rq.Status.Hard))) > 0 {
			c.enqueueResourceQuota(rq)
		}
	}
}

// addQuota queues a quota: on the priority queue when its status lacks spec.hard or
// the usage of a resource it limits that can be counted. Mirrors addQuota.
func (c *Controller) addQuota(obj interface{}) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	rq := obj.(*corev1.ResourceQuota)
	if !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) {
		c.missingUsageQueue.Add(key)
		return
	}
	for constraint := range rq.Status.Hard {
		if _, found := rq.Status.Used[constraint]; found {
			continue
		}
		for _, e := range c.registry.List() {
			if len(e.MatchingResources([]corev1.ResourceName{constraint})) > 0 {
				c.missingUsageQueue.Add(key)
				return
			}
		}
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueResourceQuota(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// Run syncs discovery's resources into monitors, waits for the caches, then runs
// workers on each queue, a full resync every resync period and a discovery resync every
// 30 s, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.stop = ctx.Done()
	c.syncMonitors()
	var wg sync.WaitGroup
	for _, q := range []workqueue.TypedRateLimitingInterface[string]{c.queue, c.missingUsageQueue} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker.Run(ctx, Name, q, []cache.InformerSynced{c.monitorsSynced}, workers, c.log, c.syncResourceQuotaFromKey)
		}()
	}
	go wait.Until(c.enqueueAll, c.resyncPeriod, ctx.Done())
	go wait.Until(c.syncMonitors, discoverySyncPeriod, ctx.Done())
	<-ctx.Done()
	wg.Wait()
}

// monitorsSynced reports whether every monitor's informer has listed.
func (c *Controller) monitorsSynced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, synced := range c.monitors {
		if !synced() {
			return false
		}
	}
	return true
}

// syncMonitors adds an object count evaluator and a monitor for every namespaced
// resource discovery lists with create, list, watch and delete that quota does not
// ignore nor count yet, then starts their informers. Mirrors QuotaMonitor.SyncMonitors.
func (c *Controller) syncMonitors() {
	if c.discovery == nil {
		return
	}
	lists, err := c.discovery.ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		c.log.Warn("discovering resources to count", "err", err)
		return
	}
	resources := discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"create", "list", "watch", "delete"}}, lists)
	gvrs, _ := discovery.GroupVersionResources(resources)
	added := false
	for gvr := range gvrs {
		gr := gvr.GroupResource()
		if _, ignored := skiffquota.IgnoredResources()[gr]; ignored || c.registry.Get(gr) != nil {
			continue
		}
		if err := c.monitor(gvr); err != nil {
			continue // no typed informer (a custom resource): not counted
		}
		listerFor := func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
			inf, err := c.factory.ForResource(gvr)
			if err != nil {
				return nil, err
			}
			return inf.Lister(), nil
		}
		c.registry.Add(generic.NewObjectCountEvaluator(gr, generic.ListResourceUsingListerFunc(listerFor, gvr), ""))
		added = true
	}
	if added {
		c.factory.Start(c.stop)
	}
}

// enqueueAll queues every quota for a recount (the full resync).
func (c *Controller) enqueueAll() {
	quotas, err := c.rqLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range quotas {
		if key, err := cache.MetaNamespaceKeyFunc(rq); err == nil {
			c.queue.AddRateLimited(key)
		}
	}
}

// syncResourceQuotaFromKey recounts the quota namespace/name; a deleted one is done.
func (c *Controller) syncResourceQuotaFromKey(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	rq, err := c.rqLister.ResourceQuotas(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncResourceQuota(ctx, rq)
}

// syncResourceQuota writes status.hard (spec.hard) and status.used (the namespace's
// usage of each resource limited that can be counted; the previous value of the others)
// when either changed. Errors: a count or the status write failed (the usage counted
// is still written). Mirrors syncResourceQuota.
func (c *Controller) syncResourceQuota(ctx context.Context, rq *corev1.ResourceQuota) error {
	dirty := !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) || rq.Status.Hard == nil || rq.Status.Used == nil
	used := corev1.ResourceList{}
	if rq.Status.Used != nil {
		used = quota.Add(corev1.ResourceList{}, rq.Status.Used)
	}
	hard := quota.Add(corev1.ResourceList{}, rq.Spec.Hard)
	var errs []error
	newUsage, err := quota.CalculateUsage(rq.Namespace, rq.Spec.Scopes, hard, c.registry, rq.Spec.ScopeSelector)
	if err != nil {
		errs = append(errs, err)
	}
	for k, v := range newUsage {
		used[k] = v
	}
	used = quota.Mask(used, quota.ResourceNames(hard))
	usage := rq.DeepCopy()
	usage.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	dirty = dirty || !quota.Equals(usage.Status.Used, rq.Status.Used)
	if dirty {
		if _, err := c.client.CoreV1().ResourceQuotas(usage.Namespace).UpdateStatus(ctx, usage, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("updating status of %s/%s: %w", rq.Namespace, rq.Name, err))
		}
	}
	return utilerrors.NewAggregate(errs)
}
