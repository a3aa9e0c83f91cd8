// Package qos computes a pod's Quality of Service class and what follows from
// it on the node: the OOM score adjustment of its containers. Mirrors
// k8s.io/kubernetes pkg/apis/core/v1/helper/qos and pkg/kubelet/qos.
package qos

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// GetPodQOS returns the pod's QoS class: status.qosClass when the API set it,
// else computed from the CPU and memory requests and limits of every
// container (init and regular): BestEffort with none, Guaranteed when every
// container limits both and the summed requests equal the summed limits,
// Burstable otherwise. Mirrors v1qos.GetPodQOS / ComputePodQOS.
func GetPodQOS(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputePodQOS(pod)
}

// ComputePodQOS computes the QoS class from the spec alone, ignoring
// status.qosClass. Mirrors v1qos.ComputePodQOS (without pod-level resources).
func ComputePodQOS(pod *v1.Pod) v1.PodQOSClass {
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	isGuaranteed := true
	add := func(list v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
		sum := list[name]
		sum.Add(q)
		list[name] = sum
	}
	all := make([]v1.Container, 0, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
	all = append(append(all, pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, c := range all {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := c.Resources.Requests[name]; ok && q.Sign() > 0 {
				add(requests, name, q)
			}
			if q, ok := c.Resources.Limits[name]; ok && q.Sign() > 0 {
				add(limits, name, q)
			} else {
				isGuaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if isGuaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				isGuaranteed = false
				break
			}
		}
	}
	if isGuaranteed && len(requests) == len(limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}
