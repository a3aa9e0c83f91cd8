// Package cm names the cgroups the kubelet places pods in: kube's QoS
// hierarchy under the node-allocatable root, with the naming of the cgroup
// driver (cgroupfs or systemd) the kubelet and its runtime agree on. The
// runtime creates and configures the cgroups from these names. Mirrors the
// naming of k8s.io/kubernetes pkg/kubelet/cm (cgroup_manager_linux,
// qos_container_manager and pod_container_manager).
package cm

import (
	"fmt"
	"path"
	"strings"

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

// CgroupDriver is how cgroups are named and managed, the kubelet's
// --cgroup-driver (kube's KubeletConfiguration.CgroupDriver).
type CgroupDriver string

// The drivers kube knows.
const (
	// CgroupDriverCgroupfs names cgroups by their path in the cgroup
	// filesystem: /kubepods/burstable/pod<uid>. kube's default.
	CgroupDriverCgroupfs CgroupDriver = "cgroupfs"
	// CgroupDriverSystemd names them as systemd slices:
	// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice.
	CgroupDriverSystemd CgroupDriver = "systemd"
)

// ParseCgroupDriver returns the driver named s ("" is cgroupfs). Errors: any
// other name.
func ParseCgroupDriver(s string) (CgroupDriver, error) {
	switch CgroupDriver(s) {
	case "", CgroupDriverCgroupfs:
		return CgroupDriverCgroupfs, nil
	case CgroupDriverSystemd:
		return CgroupDriverSystemd, nil
	}
	return "", fmt.Errorf("unknown cgroup driver %q: want %q or %q", s, CgroupDriverCgroupfs, CgroupDriverSystemd)
}

// CgroupName is a cgroup as its components from the root, independent of the
// driver: {"kubepods", "burstable", "pod<uid>"}. Mirrors cm.CgroupName.
type CgroupName []string

// ToCgroupfs is the cgroupfs driver's name: "/kubepods/burstable/pod<uid>".
func (n CgroupName) ToCgroupfs() string {
	return "/" + path.Join(n...)
}

// ToSystemd is the systemd driver's name: every component with "-" escaped to
// "_", joined by "-" into a slice, expanded into the path of its parent slices:
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice".
// Mirrors CgroupName.ToSystemd (and runc's systemd.ExpandSlice).
func (n CgroupName) ToSystemd() string {
	if len(n) == 0 || len(n) == 1 && n[0] == "" {
		return "/"
	}
	var b strings.Builder
	prefix := ""
	for _, part := range n {
		part = strings.ReplaceAll(part, "-", "_")
		if prefix != "" {
			prefix += "-"
		}
		prefix += part
		b.WriteString("/" + prefix + ".slice")
	}
	return b.String()
}

// Name is n as driver d names it (the form CRI's cgroup_parent takes).
// Mirrors cgroupCommon.Name.
func (d CgroupDriver) Name(n CgroupName) string {
	if d == CgroupDriverSystemd {
		return n.ToSystemd()
	}
	return n.ToCgroupfs()
}

// PodCgroupName is the pod's cgroup in kube's QoS hierarchy:
// kubepods/pod<uid> for a Guaranteed pod, kubepods/burstable/pod<uid> and
// kubepods/besteffort/pod<uid> for the other classes. Mirrors
// podContainerManagerImpl.GetPodContainerName.
func PodCgroupName(pod *v1.Pod) CgroupName {
	name := CgroupName{"kubepods"}
	switch qos.GetPodQOS(pod) {
	case v1.PodQOSBurstable:
		name = append(name, "burstable")
	case v1.PodQOSBestEffort:
		name = append(name, "besteffort")
	}
	return append(name, podCgroupNamePrefix+string(pod.UID))
}

// GetPodCgroupParent returns the cgroup the pod's containers go under, the
// sandbox's linux.cgroup_parent, with the cgroupfs driver's naming:
// /kubepods/pod<uid>, /kubepods/burstable/pod<uid> or
// /kubepods/besteffort/pod<uid>.
func GetPodCgroupParent(pod *v1.Pod) string {
	return CgroupDriverCgroupfs.Name(PodCgroupName(pod))
}
