package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
)

// BuildPodLogsDirectory returns <root>/<namespace>_<name>_<uid>, the pod's
// log directory (the sandbox's LogDirectory), as /var/log/pods is laid out.
func BuildPodLogsDirectory(root, namespace, name string, uid types.UID) string {
	return filepath.Join(root, strings.Join([]string{namespace, name, string(uid)}, "_"))
}

// BuildContainerLogsDirectory returns the directory holding a container's
// <attempt>.log files.
func BuildContainerLogsDirectory(root, namespace, name string, uid types.UID, containerName string) string {
	return filepath.Join(BuildPodLogsDirectory(root, namespace, name, uid), containerName)
}

// parsePodUIDFromLogsDirectory returns the pod UID of a pod log directory
// name, "" if the name is not one.
func parsePodUIDFromLogsDirectory(name string) types.UID {
	parts := strings.Split(name, "_")
	if len(parts) != 3 {
		return ""
	}
	return types.UID(parts[2])
}

// generatePodSandboxConfig builds the RunPodSandbox request's config for
// attempt, with the pod's cgroup parent from the RuntimeHelper. Errors: the pod's DNS
// config cannot be made. Mirrors kuberuntime's generatePodSandboxConfig.
func (m *Manager) generatePodSandboxConfig(pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   attempt,
		},
		LogDirectory: BuildPodLogsDirectory(m.podLogsDirectory, pod.Namespace, pod.Name, pod.UID),
		Labels:       newPodLabels(pod),
		Annotations:  newPodAnnotations(pod),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    m.runtimeHelper.GetPodCgroupParent(pod),
			SecurityContext: sandboxSecurityContext(pod),
			Sysctls:         sandboxSysctls(pod),
		},
	}
	if m.podDNS != nil {
		dns, err := m.podDNS(pod)
		if err != nil {
			return nil, err
		}
		cfg.DnsConfig = dns
	}
	if !container.IsHostNetworkPod(pod) {
		// A host-network pod keeps the node's hostname.
		cfg.Hostname = podHostname(pod)
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      toRuntimeProtocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return cfg, nil
}

// podHostname is spec.hostname or the pod name, cut to the 63 characters a
// kernel hostname allows.
func podHostname(pod *v1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

func namespacesForPod(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	} else if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

func toRuntimeProtocol(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

// createPodSandbox makes the pod's log directory and runs the sandbox with the
// runtime handler of the pod's RuntimeClass; it returns the sandbox id, or a
// message and error for the pod status and the FailedCreatePodSandBox event (a
// RuntimeClass that does not exist, a handler the runtime does not know).
// Mirrors kubeGenericRuntimeManager.createPodSandbox.
func (m *Manager) createPodSandbox(ctx context.Context, pod *v1.Pod, cfg *runtimeapi.PodSandboxConfig) (string, string, error) {
	if err := os.MkdirAll(cfg.GetLogDirectory(), 0o755); err != nil {
		msg := fmt.Sprintf("create pod log directory %q: %v", cfg.GetLogDirectory(), err)
		return "", msg, fmt.Errorf("%s", msg)
	}
	runtimeHandler := ""
	if m.runtimeClassManager != nil {
		var err error
		if runtimeHandler, err = m.runtimeClassManager.LookupRuntimeHandler(ctx, pod.Spec.RuntimeClassName); err != nil {
			return "", fmt.Sprintf("Failed to create pod sandbox: %v", err), err
		}
		if runtimeHandler != "" {
			m.logger.Info("running pod with runtime handler", "pod", podRef(pod), "runtimeHandler", runtimeHandler)
		}
	}
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.runtimeService.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: runtimeHandler})
	if err != nil {
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", grpcMessage(err))
		return "", msg, fmt.Errorf("CRI RunPodSandbox: %w", err)
	}
	if resp.GetPodSandboxId() == "" {
		return "", "Failed to create pod sandbox: runtime returned no id", fmt.Errorf("CRI RunPodSandbox: empty sandbox id")
	}
	return resp.GetPodSandboxId(), "", nil
}

// podSandboxChanged reports whether the pod needs a new sandbox, the attempt
// number to give it, and the id of the current one (to kill) if any. A new
// sandbox is needed when there is none, when the newest is not ready, or when
// more than one is ready. Mirrors kuberuntime's PodSandboxChanged, without its
// network-namespace and missing-IP checks: skiff's built-in runtimes do not
// report namespaces, and a runtime without pod networking legitimately
// reports no IP.
func podSandboxChanged(pod *v1.Pod, podStatus *container.PodStatus) (changed bool, attempt uint32, sandboxID string) {
	if len(podStatus.SandboxStatuses) == 0 {
		return true, 0, ""
	}
	ready := 0
	for _, s := range podStatus.SandboxStatuses {
		if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	newest := podStatus.SandboxStatuses[0]
	attempt = newest.GetMetadata().GetAttempt()
	if ready > 1 || newest.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return true, attempt + 1, newest.GetId()
	}
	return false, attempt, newest.GetId()
}
