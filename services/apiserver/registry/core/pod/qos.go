package pod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QOSClass computes the pod's quality-of-service class from its containers' requests and
// limits: Guaranteed when every container sets equal cpu and memory requests and limits,
// BestEffort when none sets any, Burstable otherwise. Mirrors
// k8s.io/kubernetes/pkg/apis/core/v1/helper/qos.GetPodQOS.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			if hasReq && !req.IsZero() {
				addQuantity(requests, name, req)
			}
			if hasLim && !lim.IsZero() {
				addQuantity(limits, name, lim)
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func addQuantity(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	sum := list[name]
	sum.Add(q)
	list[name] = sum
}
