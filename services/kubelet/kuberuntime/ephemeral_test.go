package kuberuntime

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
)

func TestEphemeralContainersStartOnceInTheirTargetsNamespace(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "app")
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox:1"}, TargetContainerName: "app"},
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "done", Image: "busybox:1"}},
	}
	ready := runtimeapi.PodSandboxState_SANDBOX_READY
	status := &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox(ready, 0)},
		ContainerStatuses: []*container.Status{
			cs(pod, "app", container.ContainerStateRunning, 0),
			// An ephemeral container that ran and exited is never started again.
			{ID: container.ContainerID{Type: "sim", ID: "done-id"}, Name: "done", State: container.ContainerStateExited, ExitCode: 1},
		}}
	m := &Manager{}
	changes := m.computePodActions(pod, status)
	if len(changes.EphemeralContainersToStart) != 1 || changes.EphemeralContainersToStart[0] != 0 || changes.KillPod || len(changes.ContainersToStart) != 0 {
		t.Fatalf("actions %+v: want only the debugger started", changes)
	}

	cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: namespacesForPod(pod)}}}
	if err := targetNamespace(cfg, "app", status); err != nil {
		t.Fatal(err)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Pid != runtimeapi.NamespaceMode_TARGET || ns.TargetId != "app-id" {
		t.Errorf("namespaces %v: want the PID namespace of app-id", ns)
	}
	if err := targetNamespace(cfg, "done", status); err == nil {
		t.Error("a target that is not running: no error")
	}
}
