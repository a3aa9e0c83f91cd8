// Package servicepods answers what the endpoints and endpointslice controllers both ask
// of a Service and its pods: which Services select a pod, whether a pod belongs in its
// Services' endpoints and whether it is ready, and which container port a Service port's
// targetPort names in a pod. Mirrors k8s.io/kubernetes/pkg/controller/util/endpoint and
// pkg/api/v1/pod.FindPort.
package servicepods

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	netutils "k8s.io/utils/net"
)

// ServiceKeysForPod returns the namespace/name keys of the Services in pod's namespace
// whose selector matches its labels (a Service without a selector matches nothing).
func ServiceKeysForPod(services corelisters.ServiceLister, pod *corev1.Pod) ([]string, error) {
	list, err := services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, svc := range list {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		if labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			key, err := cache.MetaNamespaceKeyFunc(svc)
			if err != nil {
				return nil, err
			}
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// PodHandler is the pod informer handler of a controller keyed by Service: add receives
// the namespace/name key of each Service selecting a pod that was added, deleted or
// changed in a way that can change an endpoint (PodChanged; after a label change, the
// Services of the old labels too). Mirrors the addPod/updatePod/deletePod handlers that
// kube's endpoints and endpointslice controllers share through
// pkg/controller/util/endpoint.
func PodHandler(services corelisters.ServiceLister, add func(key string)) cache.ResourceEventHandlerFuncs {
	enqueue := func(pod *corev1.Pod) {
		keys, err := ServiceKeysForPod(services, pod)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		for _, key := range keys {
			add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { enqueue(obj.(*corev1.Pod)) },
		UpdateFunc: func(old, cur interface{}) {
			oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
			changed, labelsChanged := PodChanged(oldPod, curPod)
			if !changed {
				return
			}
			enqueue(curPod)
			if labelsChanged {
				enqueue(oldPod)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				enqueue(pod)
			}
		},
	}
}

// PodChanged reports whether an update of a pod can change any endpoint: its IPs,
// readiness, labels, deletion, node, hostname or ports. Mirrors podEndpointsChanged.
func PodChanged(old, cur *corev1.Pod) (changed, labelsChanged bool) {
	labelsChanged = !labels.Equals(old.Labels, cur.Labels)
	if labelsChanged || old.Status.PodIP != cur.Status.PodIP || IsPodReady(old) != IsPodReady(cur) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || old.Spec.NodeName != cur.Spec.NodeName ||
		old.Spec.Hostname != cur.Spec.Hostname || old.Spec.Subdomain != cur.Spec.Subdomain ||
		old.Status.Phase != cur.Status.Phase || len(old.Status.PodIPs) != len(cur.Status.PodIPs) {
		return true, labelsChanged
	}
	return false, false
}

// IsPodReady reports whether pod's Ready condition is True.
func IsPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ShouldPodBeInEndpoints reports whether pod may have endpoints at all: it has an IP and
// has not finished for good (a pod that will not restart), and, unless
// includeTerminating, is not being deleted. Mirrors ShouldPodBeInEndpoints.
func ShouldPodBeInEndpoints(pod *corev1.Pod, includeTerminating bool) bool {
	if len(pod.Status.PodIP) == 0 && len(pod.Status.PodIPs) == 0 {
		return false
	}
	if !includeTerminating && pod.DeletionTimestamp != nil {
		return false
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
	case corev1.RestartPolicyOnFailure:
		return pod.Status.Phase != corev1.PodSucceeded
	}
	return true
}

// PodIP is pod's address of family ("" when it has none): its primary IP when that is
// of the family, else the first of status.podIPs that is.
func PodIP(pod *corev1.Pod, family corev1.IPFamily) string {
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, ip := range ips {
		if ip != "" && netutils.IsIPv6String(ip) == (family == corev1.IPv6Protocol) {
			return ip
		}
	}
	return ""
}

// FindPort is the container port svcPort's targetPort means in pod: a number as it is, a
// name looked up among the pod's container ports of the same protocol. Errors: a name no
// container port of that protocol carries. Mirrors podutil.FindPort.
func FindPort(pod *corev1.Pod, svcPort *corev1.ServicePort) (int32, error) {
	target := svcPort.TargetPort
	switch target.Type {
	case intstr.String:
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				protocol := p.Protocol
				if protocol == "" {
					protocol = corev1.ProtocolTCP
				}
				if p.Name == target.StrVal && protocol == svcPort.Protocol {
					return p.ContainerPort, nil
				}
			}
		}
	case intstr.Int:
		return target.IntVal, nil
	}
	return 0, fmt.Errorf("no suitable port for manifest: %s", pod.UID)
}
