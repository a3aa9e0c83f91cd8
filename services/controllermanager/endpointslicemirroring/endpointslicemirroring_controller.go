// Package endpointslicemirroring is kube-controller-manager's
// endpointslicemirroring-controller: for every Endpoints object whose Service exists and
// has no selector (so no controller writes the Endpoints: a user did), it keeps
// discovery.k8s.io/v1 EndpointSlices mirroring it, so that skiff's proxy, which reads
// only EndpointSlices, routes such a Service. One slice per address type and port set,
// at most 1000 addresses per subset, labelled kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io, with
// the Endpoints' own labels and annotations, and the Endpoints as controller owner.
// Endpoints labelled endpointslice.kubernetes.io/skip-mirror=true, or carrying a
// leader-election record, are not mirrored. Mirrors
// k8s.io/kubernetes/pkg/controller/endpointslicemirroring (endpointslicemirroring_controller.go,
// reconciler.go, reconciler_helpers.go, utils.go) and the subset repacking of
// k8s.io/kubernetes/pkg/api/v1/endpoints.RepackSubsets.
package endpointslicemirroring

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/controllermanager/internal/slicetracker"
	"skiff.dev/services/controllermanager/internal/worker"
)

// ControllerName is the managed-by label's value on the slices this controller owns
// (kube's controllerName).
const ControllerName = "endpointslicemirroring-controller.k8s.io"

// MaxEndpointsPerSubset is kube's --mirroring-max-endpoints-per-subset default: the
// addresses of one Endpoints subset mirrored at most.
const MaxEndpointsPerSubset = 1000

// The reasons of this controller's events (kube's events.go).
const (
	FailedToUpdateEndpointSlices = "FailedToUpdateEndpointSlices"
	InvalidIPAddress             = "InvalidIPAddress"
	TooManyAddressesToMirror     = "TooManyAddressesToMirror"
)

// Controller keeps the mirrored EndpointSlices of each selectorless Service's Endpoints.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder

	endpoints corelisters.EndpointsLister
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	synced    []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// tracker remembers the slices this controller wrote until its informer has seen
	// them, so a sync on a stale cache does not create the same slices twice (kube's
	// endpointSliceTracker).
	tracker *slicetracker.Tracker
	// MaxEndpointsPerSubset bounds the addresses mirrored per subset; default 1000.
	MaxEndpointsPerSubset int
}

// NewController wires the controller to the shared informers (endpoints,
// endpointslices, services) of the factory's caller; Run starts its workers. Mirrors
// kube's NewController: Endpoints are queued when they are or were to be mirrored,
// Services when they are selectorless or stop or start being so, and the Endpoints of
// a managed slice that changes or goes.
func NewController(endpoints coreinformers.EndpointsInformer, slices discoveryinformers.EndpointSliceInformer, services coreinformers.ServiceInformer,
	client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	c := &Controller{
		client:    client,
		recorder:  recorder,
		endpoints: endpoints.Lister(),
		services:  services.Lister(),
		slices:    slices.Lister(),
		synced:    []cache.InformerSynced{endpoints.Informer().HasSynced, slices.Informer().HasSynced, services.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint_slice_mirroring"}),
		tracker:               slicetracker.New(),
		MaxEndpointsPerSubset: MaxEndpointsPerSubset,
	}
	_, _ = endpoints.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if ep, ok := obj.(*corev1.Endpoints); ok && shouldMirror(ep) {
				c.enqueue(obj)
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			o, ok1 := old.(*corev1.Endpoints)
			n, ok2 := cur.(*corev1.Endpoints)
			if ok1 && ok2 && (shouldMirror(o) || shouldMirror(n)) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: func(obj interface{}) {
			ep, ok := obj.(*corev1.Endpoints)
			if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				ep, ok = tomb.Obj.(*corev1.Endpoints)
			}
			if ok && shouldMirror(ep) {
				c.enqueue(obj)
			}
		},
	})
	_, _ = services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if svc, ok := obj.(*corev1.Service); ok && svc.Spec.Selector == nil {
				c.enqueue(obj)
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			o, ok1 := old.(*corev1.Service)
			n, ok2 := cur.(*corev1.Service)
			if ok1 && ok2 && (o.Spec.Selector == nil) != (n.Spec.Selector == nil) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: func(obj interface{}) {
			svc, ok := obj.(*corev1.Service)
			if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				svc, ok = tomb.Obj.(*corev1.Service)
			}
			if ok && svc.Spec.Selector == nil {
				c.enqueue(obj)
			}
		},
	})
	_, _ = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok && managedByController(s) {
				c.enqueueForSlice(s)
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			o, ok1 := old.(*discoveryv1.EndpointSlice)
			n, ok2 := cur.(*discoveryv1.EndpointSlice)
			if !ok1 || !ok2 {
				return
			}
			// A slice moved to another Service, or taken from or given to this
			// controller, matters to both sides.
			if o.Labels[discoveryv1.LabelServiceName] != n.Labels[discoveryv1.LabelServiceName] || managedByController(o) != managedByController(n) {
				c.enqueueForSlice(o)
				c.enqueueForSlice(n)
				return
			}
			if managedByController(n) {
				c.enqueueForSlice(n)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok {
				return
			}
			if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
				// The informer has seen the slice go: whatever this controller wrote to
				// it is in the past.
				c.tracker.ObservedDelete(s.Namespace+"/"+name, s.Name)
			}
			if managedByController(s) {
				c.enqueueForSlice(s)
			}
		},
	})
	return c
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// enqueueForSlice queues the Endpoints a slice mirrors (kube's endpointsControllerKey:
// the slice's namespace and service-name label).
func (c *Controller) enqueueForSlice(s *discoveryv1.EndpointSlice) {
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		c.queue.Add(s.Namespace + "/" + name)
	}
}

// shouldMirror is kube's: Endpoints not labelled skip-mirror=true and not a
// leader-election lock.
func shouldMirror(ep *corev1.Endpoints) bool {
	if ep == nil || ep.Labels[discoveryv1.LabelSkipMirror] == "true" {
		return false
	}
	_, leaderLock := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]
	return !leaderLock
}

func managedByController(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == ControllerName
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "endpoint_slice_mirroring", c.queue, c.synced, workers, nil, func(ctx context.Context, key string) error {
		err := c.syncEndpoints(ctx, key)
		if errors.Is(err, errStaleCache) {
			return &worker.Requeue{After: 50 * time.Millisecond}
		}
		return err
	})
}

var errStaleCache = errors.New("endpoint slice informer cache is out of date")

// syncEndpoints brings the slices mirrored for key to what its Endpoints say; Endpoints
// that are gone or not to be mirrored, or whose Service is gone or has a selector, lose
// them. Mirrors kube's syncEndpoints.
func (c *Controller) syncEndpoints(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	existing, err := c.slices.EndpointSlices(namespace).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ControllerName}))
	if err != nil {
		return err
	}
	if c.tracker.Stale(key, existing) {
		return errStaleCache
	}
	endpoints, err := c.endpoints.Endpoints(namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !shouldMirror(endpoints)) {
		return c.deleteAll(ctx, key, existing)
	}
	if err != nil {
		return err
	}
	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && svc.Spec.Selector != nil) {
		return c.deleteAll(ctx, key, existing)
	}
	if err != nil {
		return err
	}
	return c.reconcile(ctx, key, endpoints, existing)
}

func (c *Controller) deleteAll(ctx context.Context, key string, existing []*discoveryv1.EndpointSlice) error {
	for _, s := range existing {
		if err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}
