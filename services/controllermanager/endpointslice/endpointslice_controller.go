// Package endpointslice is kube-controller-manager's endpointslice-controller: for every
// Service with a selector it keeps discovery.k8s.io/v1 EndpointSlices listing the pods
// the selector matches, with each endpoint's ready, serving and terminating conditions
// taken from the pod's Ready condition and deletion, its named target ports resolved per
// pod, at most 100 endpoints per slice, labelled kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by and owned by the Service. Mirrors
// k8s.io/kubernetes/pkg/controller/endpointslice and its reconciler
// (k8s.io/endpointslice), without topology hints.
package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/internal/servicepods"
	"skiff.dev/services/controllermanager/internal/slicetracker"
	"skiff.dev/services/controllermanager/internal/worker"
)

// ControllerName is the managed-by label's value on the slices this controller owns.
const ControllerName = "endpointslice-controller.k8s.io"

// MaxEndpointsPerSlice is kube's --max-endpoints-per-slice default.
const MaxEndpointsPerSlice = 100

// LabelHeadless marks the slices of a headless Service (kube's service.kubernetes.io/headless).
const LabelHeadless = "service.kubernetes.io/headless"

// Controller keeps each selector Service's EndpointSlices.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder

	services corelisters.ServiceLister
	pods     corelisters.PodLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// tracker remembers the slices this controller wrote until its informer has seen
	// them, so a sync on a stale cache does not create the same slices twice (kube's
	// endpointSliceTracker).
	tracker *slicetracker.Tracker
	// MaxEndpointsPerSlice bounds each slice; default 100.
	MaxEndpointsPerSlice int
}

// NewController wires the controller to the shared informers (pods, services,
// endpointslices) of the factory's caller; Run starts its workers.
func NewController(pods coreinformers.PodInformer, services coreinformers.ServiceInformer, slices discoveryinformers.EndpointSliceInformer,
	client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	c := &Controller{
		client:   client,
		recorder: recorder,
		services: services.Lister(),
		pods:     pods.Lister(),
		slices:   slices.Lister(),
		synced:   []cache.InformerSynced{pods.Informer().HasSynced, services.Informer().HasSynced, slices.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint_slice"}),
		tracker:              slicetracker.New(),
		MaxEndpointsPerSlice: MaxEndpointsPerSlice,
	}
	_, _ = services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(_, cur interface{}) { c.enqueueService(cur) },
		DeleteFunc: c.enqueueService,
	})
	_, _ = pods.Informer().AddEventHandler(servicepods.PodHandler(c.services, c.queue.Add))
	_, _ = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.sliceChanged,
		UpdateFunc: func(_, cur interface{}) { c.sliceChanged(cur) },
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if slice, ok := obj.(*discoveryv1.EndpointSlice); ok {
				// The informer has seen the slice go: whatever this controller wrote to
				// it is in the past.
				c.tracker.ObservedDelete(slice.Namespace+"/"+slice.Labels[discoveryv1.LabelServiceName], slice.Name)
			}
			c.sliceChanged(obj)
		},
	})
	return c
}

func (c *Controller) enqueueService(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// sliceChanged requeues the Service of a managed slice someone else changed or deleted,
// so the controller puts it back.
func (c *Controller) sliceChanged(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || slice.Labels[discoveryv1.LabelManagedBy] != ControllerName {
		return
	}
	if name := slice.Labels[discoveryv1.LabelServiceName]; name != "" {
		c.queue.Add(slice.Namespace + "/" + name)
	}
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "endpoint_slice", c.queue, c.synced, workers, nil, func(ctx context.Context, key string) error {
		err := c.syncService(ctx, key)
		if errors.Is(err, errStaleCache) {
			return &worker.Requeue{After: 50 * time.Millisecond}
		}
		return err
	})
}

var errStaleCache = errors.New("endpoint slice informer cache is out of date")

// syncService brings key's slices to what its pods say. A Service that is gone or has
// no selector loses the slices this controller made (kube leaves the selectorless ones
// to the mirroring controller).
func (c *Controller) syncService(ctx context.Context, key string) error {
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
	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && (svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName)) {
		return c.deleteAll(ctx, key, existing)
	}
	if err != nil {
		return err
	}
	pods, err := c.pods.Pods(namespace).List(labels.SelectorFromValidatedSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	desired := c.desiredSlices(svc, pods)
	return c.reconcile(ctx, key, svc, desired, existing)
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

// sliceContent is what one slice should hold: its ports and endpoints.
type sliceContent struct {
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

// addressType is the slices' address type for svc's primary family.
func addressType(svc *corev1.Service) (discoveryv1.AddressType, corev1.IPFamily) {
	if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6, corev1.IPv6Protocol
	}
	return discoveryv1.AddressTypeIPv4, corev1.IPv4Protocol
}

// desiredSlices groups svc's pods' endpoints by their resolved ports (a named
// targetPort may mean another number in each pod) and cuts each group into slices of at
// most MaxEndpointsPerSlice, sorted so the result is stable.
func (c *Controller) desiredSlices(svc *corev1.Service, pods []*corev1.Pod) []sliceContent {
	_, family := addressType(svc)
	groups := map[string]*sliceContent{}
	var order []string
	for _, pod := range pods {
		if !servicepods.ShouldPodBeInEndpoints(pod, true) {
			continue
		}
		ip := servicepods.PodIP(pod, family)
		if ip == "" {
			continue
		}
		ports := endpointPorts(svc, pod)
		hash := portsKey(ports)
		g := groups[hash]
		if g == nil {
			g = &sliceContent{ports: ports}
			groups[hash] = g
			order = append(order, hash)
		}
		g.endpoints = append(g.endpoints, podEndpoint(svc, pod, ip))
	}
	sort.Strings(order)
	max := c.MaxEndpointsPerSlice
	if max <= 0 {
		max = MaxEndpointsPerSlice
	}
	var out []sliceContent
	for _, hash := range order {
		g := groups[hash]
		sort.Slice(g.endpoints, func(i, j int) bool { return g.endpoints[i].Addresses[0] < g.endpoints[j].Addresses[0] })
		for start := 0; start < len(g.endpoints); start += max {
			out = append(out, sliceContent{ports: g.ports, endpoints: g.endpoints[start:min(start+max, len(g.endpoints))]})
		}
	}
	return out
}

// endpointPorts resolves svc's ports in pod; a named port the pod lacks is left out
// (kube logs it and does the same).
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	ports := []discoveryv1.EndpointPort{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		port, err := servicepods.FindPort(pod, sp)
		if err != nil {
			continue
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: ptr.To(sp.Protocol), AppProtocol: sp.AppProtocol})
	}
	return ports
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%s/%d/%s", *p.Name, *p.Port, *p.Protocol)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// podEndpoint is pod's endpoint: ready when the pod is Ready and not terminating (or the
// Service publishes not-ready addresses), serving when Ready, terminating when deleted.
// Mirrors podToEndpoint.
func podEndpoint(svc *corev1.Service, pod *corev1.Pod, ip string) discoveryv1.Endpoint {
	ready := servicepods.IsPodReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ep := discoveryv1.Endpoint{
		Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(svc.Spec.PublishNotReadyAddresses || (ready && !terminating)),
			Serving:     ptr.To(svc.Spec.PublishNotReadyAddresses || ready),
			Terminating: ptr.To(terminating),
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		ep.NodeName = ptr.To(pod.Spec.NodeName)
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && svc.Namespace == pod.Namespace {
		ep.Hostname = ptr.To(pod.Spec.Hostname)
	}
	return ep
}

// reconcile makes existing match desired with as few writes as possible: a slice whose
// ports match a desired one is rewritten in place (when its content differs), missing
// ones are created and left-over ones deleted. A Service with no endpoints keeps one
// empty placeholder slice, as kube's does.
func (c *Controller) reconcile(ctx context.Context, key string, svc *corev1.Service, desired []sliceContent, existing []*discoveryv1.EndpointSlice) error {
	if len(desired) == 0 {
		desired = []sliceContent{{}}
	}
	addrType, _ := addressType(svc)
	sort.Slice(existing, func(i, j int) bool { return existing[i].Name < existing[j].Name })
	used := make([]bool, len(existing))
	var unmatched []sliceContent
	// First pass: a desired slice reuses an unused existing slice with the same ports.
	for _, d := range desired {
		matched := false
		for i, s := range existing {
			if used[i] || s.AddressType != addrType || portsKey(s.Ports) != portsKey(d.ports) {
				continue
			}
			used[i], matched = true, true
			if err := c.update(ctx, key, svc, s, d); err != nil {
				return err
			}
			break
		}
		if !matched {
			unmatched = append(unmatched, d)
		}
	}
	// Second pass: the rest take over left-over slices, else new ones.
	for _, d := range unmatched {
		reused := false
		for i, s := range existing {
			if used[i] || s.AddressType != addrType {
				continue
			}
			used[i], reused = true, true
			if err := c.update(ctx, key, svc, s, d); err != nil {
				return err
			}
			break
		}
		if reused {
			continue
		}
		slice := c.newSlice(svc, addrType, d)
		created, err := c.client.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, slice, metav1.CreateOptions{})
		if err != nil {
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				return errStaleCache
			}
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices", "Error updating Endpoint Slices for Service %s: %v", key, err)
			return err
		}
		c.tracker.Wrote(key, created)
	}
	for i, s := range existing {
		if used[i] {
			continue
		}
		if err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}

// sliceLabels are the Service's labels plus the controller's (kube's setEndpointSliceLabels).
func sliceLabels(svc *corev1.Service) map[string]string {
	l := map[string]string{}
	for k, v := range svc.Labels {
		if k == discoveryv1.LabelServiceName || k == discoveryv1.LabelManagedBy || k == LabelHeadless {
			continue
		}
		l[k] = v
	}
	l[discoveryv1.LabelServiceName] = svc.Name
	l[discoveryv1.LabelManagedBy] = ControllerName
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[LabelHeadless] = ""
	}
	return l
}

func (c *Controller) newSlice(svc *corev1.Service, addrType discoveryv1.AddressType, d sliceContent) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    slicePrefix(svc.Name),
			Namespace:       svc.Namespace,
			Labels:          sliceLabels(svc),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
		},
		AddressType: addrType,
		Ports:       d.ports,
		Endpoints:   d.endpoints,
	}
}

// slicePrefix is "<service>-", cut so generated names stay within 63 characters.
func slicePrefix(name string) string {
	const maxPrefix = 63 - 5
	prefix := name + "-"
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix
}

// update rewrites s to hold d (and the Service's labels and ownership) unless it
// already does.
func (c *Controller) update(ctx context.Context, key string, svc *corev1.Service, s *discoveryv1.EndpointSlice, d sliceContent) error {
	want := sliceLabels(svc)
	owner := *metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))
	if apiequality.Semantic.DeepEqual(s.Endpoints, d.endpoints) && apiequality.Semantic.DeepEqual(s.Ports, d.ports) &&
		apiequality.Semantic.DeepEqual(s.Labels, want) && len(s.OwnerReferences) == 1 && s.OwnerReferences[0].UID == svc.UID {
		return nil
	}
	next := s.DeepCopy()
	next.Endpoints, next.Ports, next.Labels = d.endpoints, d.ports, want
	next.OwnerReferences = []metav1.OwnerReference{owner}
	updated, err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return errStaleCache
		}
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices", "Error updating Endpoint Slices for Service %s: %v", key, err)
		return err
	}
	c.tracker.Wrote(key, updated)
	return nil
}
