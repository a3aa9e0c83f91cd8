package status

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
)

// Reasons of the kubelet-owned pod conditions, as Kubernetes spells them.
const (
	UnknownContainerStatuses = "UnknownContainerStatuses"
	PodCompleted             = "PodCompleted"
	ContainersNotReady       = "ContainersNotReady"
	ContainersNotInitialized = "ContainersNotInitialized"
	ReadinessGatesNotReady   = "ReadinessGatesNotReady"
)

// PodConditionByKubelet reports whether the kubelet owns (computes) pod
// conditions of type t; the status manager keeps every other condition as
// the API has it. Mirrors kubetypes.PodConditionByKubelet.
func PodConditionByKubelet(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodReadyToStartContainers:
		return true
	}
	return false
}

// GenerateContainersReadyCondition is True when every container is ready,
// False with reason ContainersNotReady (and the unready names) otherwise, or
// PodCompleted once the pod succeeded. Mirrors
// status.GenerateContainersReadyCondition.
func GenerateContainersReadyCondition(spec *v1.PodSpec, containerStatuses []v1.ContainerStatus, podPhase v1.PodPhase) v1.PodCondition {
	if containerStatuses == nil {
		return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: UnknownContainerStatuses}
	}
	var unknown, unready []string
	for _, c := range spec.Containers {
		s, ok := findStatus(containerStatuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case !s.Ready:
			unready = append(unready, c.Name)
		}
	}
	if podPhase == v1.PodSucceeded && len(unknown) == 0 {
		return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: PodCompleted}
	}
	if msg := unreadyMessage(unknown, unready); msg != "" {
		return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: ContainersNotReady, Message: msg}
	}
	return v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue}
}

// GeneratePodReadyCondition is ContainersReady restated as Ready, and then
// False with reason ReadinessGatesNotReady while a condition named by one of
// spec.readinessGates is missing from conditions (the pod's current ones) or
// not True. Mirrors status.GeneratePodReadyCondition.
func GeneratePodReadyCondition(spec *v1.PodSpec, conditions []v1.PodCondition, containerStatuses []v1.ContainerStatus, podPhase v1.PodPhase) v1.PodCondition {
	c := GenerateContainersReadyCondition(spec, containerStatuses, podPhase)
	c.Type = v1.PodReady
	if c.Status != v1.ConditionTrue {
		return c
	}
	var unready []string
	for _, rg := range spec.ReadinessGates {
		i := slices.IndexFunc(conditions, func(c v1.PodCondition) bool { return c.Type == rg.ConditionType })
		switch {
		case i < 0:
			unready = append(unready, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(rg.ConditionType)))
		case conditions[i].Status != v1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(rg.ConditionType), conditions[i].Status))
		}
	}
	if len(unready) > 0 {
		return v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: strings.Join(unready, ", ")}
	}
	return c
}

// NeedToReconcilePodReadiness reports whether pod, as the API has it, has
// readiness gates and a Ready condition that no longer matches them (a gate's
// condition changed): the kubelet must sync it. Mirrors
// status.NeedToReconcilePodReadiness.
func NeedToReconcilePodReadiness(pod *v1.Pod) bool {
	if len(pod.Spec.ReadinessGates) == 0 {
		return false
	}
	want := GeneratePodReadyCondition(&pod.Spec, pod.Status.Conditions, pod.Status.ContainerStatuses, pod.Status.Phase)
	i := slices.IndexFunc(pod.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.PodReady })
	return i >= 0 && (pod.Status.Conditions[i].Status != want.Status || pod.Status.Conditions[i].Message != want.Message)
}

// GeneratePodInitializedCondition is True once every init container
// succeeded (always, without init containers), False with reason
// ContainersNotInitialized otherwise. Mirrors
// status.GeneratePodInitializedCondition.
func GeneratePodInitializedCondition(spec *v1.PodSpec, initStatuses []v1.ContainerStatus, podPhase v1.PodPhase) v1.PodCondition {
	if len(spec.InitContainers) == 0 {
		return v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue}
	}
	if initStatuses == nil {
		return v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionFalse, Reason: UnknownContainerStatuses}
	}
	var unknown, incomplete []string
	for _, c := range spec.InitContainers {
		s, ok := findStatus(initStatuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case s.State.Terminated == nil || s.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, c.Name)
		}
	}
	if podPhase == v1.PodSucceeded && len(unknown) == 0 {
		return v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue, Reason: PodCompleted}
	}
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unknown status: %s", formatNames(unknown)))
	}
	if len(incomplete) > 0 {
		parts = append(parts, fmt.Sprintf("containers with incomplete status: %s", formatNames(incomplete)))
	}
	if len(parts) > 0 {
		return v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionFalse, Reason: ContainersNotInitialized, Message: strings.Join(parts, ", ")}
	}
	return v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue}
}

// GeneratePodReadyToStartContainersCondition is True while the pod has a
// ready sandbox (its network is set up), False otherwise. Mirrors
// status.GeneratePodReadyToStartContainersCondition.
func GeneratePodReadyToStartContainersCondition(podStatus *container.PodStatus) v1.PodCondition {
	if podStatus != nil && len(podStatus.SandboxStatuses) > 0 &&
		podStatus.SandboxStatuses[0].GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
		return v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue}
	}
	return v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse}
}

func findStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	i := slices.IndexFunc(statuses, func(s v1.ContainerStatus) bool { return s.Name == name })
	if i < 0 {
		return v1.ContainerStatus{}, false
	}
	return statuses[i], true
}

func unreadyMessage(unknown, unready []string) string {
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unknown status: %s", formatNames(unknown)))
	}
	if len(unready) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unready status: %s", formatNames(unready)))
	}
	return strings.Join(parts, ", ")
}

// formatNames renders names as Go's %v of a slice does ("[a b]"), which is
// what kubectl users see in Kubernetes' messages.
func formatNames(names []string) string {
	return fmt.Sprint(names)
}
