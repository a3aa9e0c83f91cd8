package container

import (
	"encoding/json"
	"hash/fnv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ShouldContainerBeRestarted reports whether the container of pod described
// by spec should be (re)started given the runtime status: never for a pod
// being deleted; always when it never ran or is in an unknown or created
// state; otherwise per restartPolicy (Never: no; OnFailure: only after a
// non-zero exit; Always: yes). Mirrors kubecontainer.ShouldContainerBeRestarted.
func ShouldContainerBeRestarted(container *v1.Container, pod *v1.Pod, podStatus *PodStatus) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	status := podStatus.FindContainerStatusByName(container.Name)
	if status == nil {
		return true
	}
	switch status.State {
	case ContainerStateRunning:
		return false
	case ContainerStateUnknown, ContainerStateCreated:
		return true
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return status.ExitCode != 0
	}
	return true
}

// HashContainer returns a hash of the parts of a container spec that, when
// changed, require the container to be recreated (resources are excluded, as
// kubelet's in-place resize does). It is stored in the
// io.kubernetes.container.hash annotation. Mirrors kubecontainer.HashContainer.
func HashContainer(container *v1.Container) uint64 {
	c := container.DeepCopy()
	c.Resources = v1.ResourceRequirements{}
	// Probes and lifecycle hooks do not change what runs; kubelet restarts
	// a container only when what it runs changed.
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
	data, _ := json.Marshal(c)
	h := fnv.New32a()
	_, _ = h.Write(data)
	return uint64(h.Sum32())
}

// IsHostNetworkPod reports whether pod shares the node's network namespace.
func IsHostNetworkPod(pod *v1.Pod) bool {
	return pod.Spec.HostNetwork
}

// ParseContainerID parses "<type>://<id>", as a pod status' containerID
// shows it; anything else (including "") gives the zero ContainerID.
// Mirrors kubecontainer.ParseContainerID.
func ParseContainerID(s string) ContainerID {
	typ, id, ok := strings.Cut(s, "://")
	if !ok || id == "" {
		return ContainerID{}
	}
	return ContainerID{Type: typ, ID: id}
}
