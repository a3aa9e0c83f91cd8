// Package endpoint is kube-controller-manager's endpoints-controller: for every Service
// with a selector it keeps a core/v1 Endpoints object of the same name, with the matching
// pods' addresses (Ready pods under addresses, the others under notReadyAddresses) grouped
// into subsets by their resolved ports. Mirrors k8s.io/kubernetes/pkg/controller/endpoint.
package endpoint

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/internal/servicepods"
	"skiff.dev/services/controllermanager/internal/worker"
)

// MaxCapacity is the most addresses one Endpoints object holds; beyond it the object is
// truncated and annotated (kube's maxCapacity).
const MaxCapacity = 1000

// Annotations and labels kube's endpoints controller sets.
const (
	// OverCapacityAnnotation is "truncated" on an Endpoints object cut to MaxCapacity.
	OverCapacityAnnotation = "endpoints.kubernetes.io/over-capacity"
	// LabelHeadless marks the Endpoints of a headless Service.
	LabelHeadless = "service.kubernetes.io/headless"
)

// Controller keeps each selector Service's Endpoints.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder

	services  corelisters.ServiceLister
	pods      corelisters.PodLister
	endpoints corelisters.EndpointsLister
	synced    []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
}

// NewController wires the controller to the shared informers; Run starts its workers.
func NewController(pods coreinformers.PodInformer, services coreinformers.ServiceInformer, endpoints coreinformers.EndpointsInformer,
	client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	c := &Controller{
		client:    client,
		recorder:  recorder,
		services:  services.Lister(),
		pods:      pods.Lister(),
		endpoints: endpoints.Lister(),
		synced:    []cache.InformerSynced{pods.Informer().HasSynced, services.Informer().HasSynced, endpoints.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint"}),
	}
	_, _ = services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur interface{}) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	})
	_, _ = pods.Informer().AddEventHandler(servicepods.PodHandler(c.services, c.queue.Add))
	// An Endpoints object deleted by someone else is put back. Updates are not watched,
	// as in kube: the Endpoints of a Service that does not exist (yet) are their
	// writer's until a Service of that name comes and goes.
	_, _ = endpoints.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.enqueue,
	})
	return c
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "endpoint", c.queue, c.synced, workers, nil, c.syncService)
}

// syncService writes key's Endpoints from its pods, or deletes them when the Service is
// gone. A Service without a selector is left alone: its Endpoints are its owner's (the
// apiserver's for kubernetes, a user's otherwise).
func (c *Controller) syncService(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		err := c.client.CoreV1().Endpoints(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Spec.Selector == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	pods, err := c.pods.Pods(namespace).List(labels.SelectorFromValidatedSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	subsets, truncated := subsetsFor(svc, pods)

	current, err := c.endpoints.Endpoints(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	create := apierrors.IsNotFound(err)
	want := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if !create {
		want = current.DeepCopy()
	}
	want.Labels = endpointsLabels(svc)
	if truncated {
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[OverCapacityAnnotation] = "truncated"
	} else {
		delete(want.Annotations, OverCapacityAnnotation)
	}
	want.Subsets = subsets
	if !create && apiequality.Semantic.DeepEqual(current.Subsets, want.Subsets) &&
		apiequality.Semantic.DeepEqual(current.Labels, want.Labels) && apiequality.Semantic.DeepEqual(current.Annotations, want.Annotations) {
		return nil
	}
	if create {
		_, err = c.client.CoreV1().Endpoints(namespace).Create(ctx, want, metav1.CreateOptions{})
	} else {
		_, err = c.client.CoreV1().Endpoints(namespace).Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("endpoints cache is out of date: %w", err)
		}
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s: %v", key, err)
		return err
	}
	return nil
}

// endpointsLabels are the Service's labels, plus the headless label for a headless one
// and skip-mirror (the EndpointSlice controller writes this Service's slices, not the
// mirroring controller), as kube's endpoints controller sets them.
func endpointsLabels(svc *corev1.Service) map[string]string {
	l := map[string]string{}
	for k, v := range svc.Labels {
		l[k] = v
	}
	delete(l, LabelHeadless)
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[LabelHeadless] = ""
	}
	l[discoveryv1.LabelSkipMirror] = "true"
	return l
}

// subsetsFor builds svc's subsets: one per distinct set of resolved ports, ready and
// not-ready addresses apart, sorted (kube's RepackSubsets), at most MaxCapacity
// addresses (truncated reports a cut).
func subsetsFor(svc *corev1.Service, pods []*corev1.Pod) (subsets []corev1.EndpointSubset, truncated bool) {
	family := corev1.IPv4Protocol
	if len(svc.Spec.IPFamilies) > 0 {
		family = svc.Spec.IPFamilies[0]
	}
	bySet := map[string]*corev1.EndpointSubset{}
	var keys []string
	total := 0
	for _, pod := range pods {
		if !servicepods.ShouldPodBeInEndpoints(pod, svc.Spec.PublishNotReadyAddresses) {
			continue
		}
		ip := servicepods.PodIP(pod, family)
		if ip == "" {
			continue
		}
		addr := corev1.EndpointAddress{IP: ip, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
		if pod.Spec.NodeName != "" {
			addr.NodeName = ptr.To(pod.Spec.NodeName)
		}
		if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name {
			addr.Hostname = pod.Spec.Hostname
		}
		var ports []corev1.EndpointPort
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			port, err := servicepods.FindPort(pod, sp)
			if err != nil {
				continue
			}
			ports = append(ports, corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: sp.Protocol, AppProtocol: sp.AppProtocol})
		}
		if len(svc.Spec.Ports) > 0 && len(ports) == 0 {
			continue // no port of the Service resolves in this pod
		}
		sort.Slice(ports, func(i, j int) bool { return ports[i].Name < ports[j].Name })
		key := portSetKey(ports)
		ss := bySet[key]
		if ss == nil {
			ss = &corev1.EndpointSubset{Ports: ports}
			bySet[key] = ss
			keys = append(keys, key)
		}
		if total >= MaxCapacity {
			truncated = true
			continue
		}
		total++
		if svc.Spec.PublishNotReadyAddresses || servicepods.IsPodReady(pod) {
			ss.Addresses = append(ss.Addresses, addr)
		} else {
			ss.NotReadyAddresses = append(ss.NotReadyAddresses, addr)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		ss := bySet[key]
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			continue
		}
		sortAddresses(ss.Addresses)
		sortAddresses(ss.NotReadyAddresses)
		subsets = append(subsets, *ss)
	}
	return subsets, truncated
}

func portSetKey(ports []corev1.EndpointPort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%s/%d/%s", p.Name, p.Port, p.Protocol)
	}
	return strings.Join(parts, ",")
}

func sortAddresses(addrs []corev1.EndpointAddress) {
	sort.Slice(addrs, func(i, j int) bool {
		if addrs[i].IP != addrs[j].IP {
			return addrs[i].IP < addrs[j].IP
		}
		return addrs[i].TargetRef.UID < addrs[j].TargetRef.UID
	})
}
