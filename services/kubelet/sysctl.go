package kubelet

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/kubelet/qos"
)

// safeSysctls are the sysctls every pod may set: namespaced, and unable to affect
// other pods or the node. kube's pkg/kubelet/sysctl SafeSysctlAllowlist (v1.32).
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
}

// Reason of a pod the kubelet refuses for its sysctls, kube's.
const reasonSysctlForbidden = "SysctlForbidden"

// admitSysctls reports why pod may not run on this node for its sysctls ("" when it
// may): each must be safe or allowed by --allowed-unsafe-sysctls (a name, or a prefix
// ending in *), and a net.* one may not be set by a host-network pod (it would set the
// node's), nor a kernel.shm*, kernel.msg*, kernel.sem or fs.mqueue.* one by a host-IPC
// pod. Slashes in names count as dots. Mirrors kube's sysctl admission handler
// (pkg/kubelet/sysctl).
func admitSysctls(pod *v1.Pod, allowedUnsafe []string) string {
	if pod.Spec.SecurityContext == nil {
		return ""
	}
	allowed := func(name string) bool {
		for _, list := range [][]string{safeSysctls, allowedUnsafe} {
			for _, a := range list {
				if a == name || strings.HasSuffix(a, "*") && strings.HasPrefix(name, strings.TrimSuffix(a, "*")) {
					return true
				}
			}
		}
		return false
	}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := strings.ReplaceAll(s.Name, "/", ".")
		if !allowed(name) {
			return fmt.Sprintf("forbidden sysctl: %q not allowlisted", s.Name)
		}
		if pod.Spec.HostNetwork && strings.HasPrefix(name, "net.") {
			return fmt.Sprintf("forbidden sysctl: %q not allowed with host net enabled", s.Name)
		}
		ipc := strings.HasPrefix(name, "kernel.shm") || strings.HasPrefix(name, "kernel.msg") || name == "kernel.sem" || strings.HasPrefix(name, "fs.mqueue.")
		if pod.Spec.HostIPC && ipc {
			return fmt.Sprintf("forbidden sysctl: %q not allowed with host ipc enabled", s.Name)
		}
	}
	return ""
}

// rejectPod fails pod without running it: a Warning event and a Failed status whose
// message says why ("Pod was rejected: ..."). Mirrors Kubelet.rejectPod.
func (kl *Kubelet) rejectPod(pod *v1.Pod, reason, message string) {
	kl.recorder.Event(pod, v1.EventTypeWarning, reason, message)
	kl.statusManager.SetPodStatus(pod, v1.PodStatus{
		QOSClass: qos.GetPodQOS(pod),
		Phase:    v1.PodFailed,
		Reason:   reason,
		Message:  "Pod was rejected: " + message,
	})
}
