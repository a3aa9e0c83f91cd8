package qos

import v1 "k8s.io/api/core/v1"

// OOM score adjustments by tier, kube's values (pkg/kubelet/qos/policy.go):
// the lower, the later the kernel's OOM killer picks a process.
const (
	// PodInfraOOMAdj is the sandbox's (pause container's) adjustment.
	PodInfraOOMAdj = -998
	// KubeletOOMScoreAdj is the kubelet's own.
	KubeletOOMScoreAdj    = -999
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000
)

// systemCriticalPriority is the priority at and above which a pod is
// critical (scheduling.SystemCriticalPriority).
const systemCriticalPriority = 2_000_000_000

// GetContainerOOMScoreAdjust returns the oom_score_adj for container of pod
// on a node with memoryCapacity bytes: -997 for Guaranteed pods (and
// node-critical ones), 1000 for BestEffort, and for Burstable
// 1000 - 1000*memoryRequest/memoryCapacity, kept within [3, 999] so a
// Burstable container always goes before a Guaranteed one and after a
// BestEffort one. Mirrors qos.GetContainerOOMScoreAdjust (without the
// sidecar adjustment).
func GetContainerOOMScoreAdjust(pod *v1.Pod, container *v1.Container, memoryCapacity int64) int {
	if isNodeCriticalPod(pod) {
		return guaranteedOOMScoreAdj
	}
	switch GetPodQOS(pod) {
	case v1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return besteffortOOMScoreAdj - 1
	}
	memoryRequest := container.Resources.Requests.Memory().Value()
	oomScoreAdjust := 1000 - (1000*memoryRequest)/memoryCapacity
	if int(oomScoreAdjust) < 1000+guaranteedOOMScoreAdj {
		return 1000 + guaranteedOOMScoreAdj
	}
	if int(oomScoreAdjust) == besteffortOOMScoreAdj {
		return int(oomScoreAdjust - 1)
	}
	return int(oomScoreAdjust)
}

// isNodeCriticalPod mirrors kubelettypes.IsNodeCriticalPod: priority class
// system-node-critical with a critical priority.
func isNodeCriticalPod(pod *v1.Pod) bool {
	return pod.Spec.PriorityClassName == "system-node-critical" &&
		pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
