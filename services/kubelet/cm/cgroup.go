// Package cm names the cgroups the kubelet places pods in: kube's QoS
// hierarchy under the node-allocatable root, with the cgroupfs driver's
// naming. The runtime creates and configures the cgroups from these names.
// Mirrors the naming of k8s.io/kubernetes pkg/kubelet/cm (qos_container_manager
// and pod_container_manager; the systemd driver is not supported yet).
package cm

import (
	"path"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/kubelet/qos"
)

// Cgroup names of the QoS hierarchy (cgroupfs driver).
const (
	// NodeAllocatableCgroupName is the root of every pod's cgroup.
	NodeAllocatableCgroupName = "/kubepods"
	// BurstableCgroupName holds Burstable pods.
	BurstableCgroupName = NodeAllocatableCgroupName + "/burstable"
	// BestEffortCgroupName holds BestEffort pods.
	BestEffortCgroupName = NodeAllocatableCgroupName + "/besteffort"
	podCgroupNamePrefix  = "pod"
)

// GetPodCgroupParent returns the cgroup the pod's containers go under, the
// sandbox's linux.cgroup_parent: /kubepods/pod<uid> for a Guaranteed pod,
// /kubepods/burstable/pod<uid> and /kubepods/besteffort/pod<uid> for the
// other classes. Mirrors podContainerManagerImpl.GetPodContainerName.
func GetPodCgroupParent(pod *v1.Pod) string {
	parent := NodeAllocatableCgroupName
	switch qos.GetPodQOS(pod) {
	case v1.PodQOSBurstable:
		parent = BurstableCgroupName
	case v1.PodQOSBestEffort:
		parent = BestEffortCgroupName
	}
	return path.Join(parent, podCgroupNamePrefix+string(pod.UID))
}
