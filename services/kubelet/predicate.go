package kubelet

import (
	v1 "k8s.io/api/core/v1"

	kubetypes "skiff.dev/services/kubelet/types"
)

// reasonNodePorts is the reason of a pod rejected for a host port another pod holds,
// as kube's kubelet names the failed predicate.
const reasonNodePorts = "NodePorts"

// admitHostPorts reports why pod may not run on this node for its host ports ("" when
// it may): a host port (protocol, port) that an active pod already holds on the same
// host IP, or on any IP when either side binds 0.0.0.0. Mirrors the NodePorts part of
// the kubelet's predicate admission (pkg/kubelet/lifecycle/predicate.go, the scheduler's
// nodeports plugin), which catches pods placed by nodeName, past the scheduler.
func admitHostPorts(pod *v1.Pod, active []*v1.Pod) string {
	wanted := hostPorts(pod)
	if len(wanted) == 0 {
		return ""
	}
	for _, other := range active {
		if other.UID == pod.UID {
			continue
		}
		for _, held := range hostPorts(other) {
			for _, w := range wanted {
				if w.conflicts(held) {
					return "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
				}
			}
		}
	}
	return ""
}

// hostPort is one host port a container asks for.
type hostPort struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

// conflicts: the same protocol and port, on the same IP or where either binds every IP.
func (a hostPort) conflicts(b hostPort) bool {
	if a.protocol != b.protocol || a.port != b.port {
		return false
	}
	return a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0"
}

// hostPorts lists the host ports of pod's containers (init containers included), an
// empty host IP read as 0.0.0.0 and an empty protocol as TCP.
func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []v1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
				if hp.ip == "" {
					hp.ip = "0.0.0.0"
				}
				if hp.protocol == "" {
					hp.protocol = v1.ProtocolTCP
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}

// activePods are the pods this kubelet runs or will run: admitted, not mirror pods, not
// ended and not known to have terminated. Mirrors Kubelet.GetActivePods.
func (kl *Kubelet) activePods() []*v1.Pod {
	var out []*v1.Pod
	for _, p := range kl.podManager.GetPods() {
		if kubetypes.IsMirrorPod(p) || kl.podWorkers.IsPodKnownTerminated(p.UID) {
			continue
		}
		if s, ok := kl.statusManager.GetPodStatus(p.UID); ok && (s.Phase == v1.PodFailed || s.Phase == v1.PodSucceeded) {
			continue
		}
		out = append(out, p)
	}
	return out
}
