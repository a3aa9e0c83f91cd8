package pod

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"skiff.dev/services/apiserver/registry"
)

// Printer prints pods as kubectl get pods shows them. Mirrors printPod in
// k8s.io/kubernetes/pkg/printers/internalversion/printers.go.
type Printer struct{}

// TableColumns are NAME READY STATUS RESTARTS AGE, and wide IP NODE NOMINATED NODE
// READINESS GATES.
func (Printer) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
		{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
		{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
		registry.AgeColumn,
		{Name: "IP", Type: "string", Priority: 1, Description: "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."},
		{Name: "Node", Type: "string", Priority: 1, Description: "NodeName is a request to schedule this pod onto a specific node."},
		{Name: "Nominated Node", Type: "string", Priority: 1, Description: "nominatedNodeName is set only when this pod preempts other pods on the node."},
		{Name: "Readiness Gates", Type: "string", Priority: 1, Description: "If specified, all readiness gates will be evaluated for pod readiness."},
	}
}

// TableRow computes the cells of one pod: READY counts ready running containers; STATUS
// starts from the phase, is overridden by status.reason, then by an init container's or
// container's waiting or terminated reason, and is "Terminating" once deletion started.
func (Printer) TableRow(obj runtime.Object) []interface{} {
	pod := obj.(*corev1.Pod)
	restarts, readyContainers := 0, 0
	var lastRestart time.Time
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}

	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
			lastRestart = t.FinishedAt.Time
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case c.State.Terminated != nil:
			if c.State.Terminated.Reason == "" {
				if c.State.Terminated.Signal != 0 {
					reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
				} else {
					reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
				}
			} else {
				reason = "Init:" + c.State.Terminated.Reason
			}
			initializing = true
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
			initializing = true
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
			initializing = true
		}
		break
	}

	if !initializing {
		restarts = 0
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
				lastRestart = t.FinishedAt.Time
			}
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				readyContainers++
			}
		}
		// Once a container is running, a completed sibling does not make the pod "Completed".
		if reason == "Completed" && hasRunning {
			if hasPodReadyCondition(pod.Status.Conditions) {
				reason = "Running"
			} else {
				reason = "NotReady"
			}
		}
	}

	if pod.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.DeletionTimestamp != nil && !isTerminal(pod.Status.Phase) {
		reason = "Terminating"
	}

	restartsCell := fmt.Sprint(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartsCell = fmt.Sprintf("%d (%s ago)", restarts, duration.HumanDuration(time.Since(lastRestart)))
	}
	nodeName, podIP, nominated := pod.Spec.NodeName, "<none>", "<none>"
	if nodeName == "" {
		nodeName = "<none>"
	}
	if len(pod.Status.PodIPs) > 0 {
		podIP = pod.Status.PodIPs[0].IP
	} else if pod.Status.PodIP != "" {
		podIP = pod.Status.PodIP
	}
	if pod.Status.NominatedNodeName != "" {
		nominated = pod.Status.NominatedNodeName
	}
	readinessGates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		trueGates := 0
		for _, g := range pod.Spec.ReadinessGates {
			for _, c := range pod.Status.Conditions {
				if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
					trueGates++
				}
			}
		}
		readinessGates = fmt.Sprintf("%d/%d", trueGates, n)
	}
	return []interface{}{
		pod.Name,
		fmt.Sprintf("%d/%d", readyContainers, len(pod.Spec.Containers)),
		reason,
		restartsCell,
		registry.TranslateTimestampSince(pod.CreationTimestamp),
		podIP, nodeName, nominated, readinessGates,
	}
}

func hasPodReadyCondition(conditions []corev1.PodCondition) bool {
	for _, c := range conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// ContainerCells are the CONTAINERS and IMAGES cells of a workload's wide row: the
// containers' names and images, comma-separated. Mirrors printers' layoutContainerCells.
func ContainerCells(containers []corev1.Container) (names, images string) {
	n := make([]string, len(containers))
	i := make([]string, len(containers))
	for k, c := range containers {
		n[k], i[k] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

// isTerminal reports whether phase is one a pod never leaves (Succeeded, Failed).
func isTerminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}
