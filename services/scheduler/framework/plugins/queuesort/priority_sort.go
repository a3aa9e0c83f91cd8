// Package queuesort holds the QueueSort plugin PrioritySort.
package queuesort

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// PrioritySort decides which pending pod is tried first: higher
// spec.priority first, then the older pod (creationTimestamp), then the one
// queued earlier. Mirrors kube-scheduler's queuesort.PrioritySort, which
// breaks priority ties by queue time only; skiff compares creation time
// first so that pods re-listed together after a scheduler restart keep
// their age order.
type PrioritySort struct{}

var _ framework.QueueSortPlugin = PrioritySort{}

// New builds the plugin.
func New(context.Context, framework.Handle) (framework.Plugin, error) {
	return PrioritySort{}, nil
}

// Name returns "PrioritySort".
func (PrioritySort) Name() string { return names.PrioritySort }

// Less reports whether pInfo1 should be scheduled before pInfo2.
func (PrioritySort) Less(pInfo1, pInfo2 *framework.QueuedPodInfo) bool {
	p1, p2 := PodPriority(pInfo1.Pod), PodPriority(pInfo2.Pod)
	if p1 != p2 {
		return p1 > p2
	}
	c1, c2 := pInfo1.Pod.CreationTimestamp.Time, pInfo2.Pod.CreationTimestamp.Time
	if !c1.Equal(c2) {
		return c1.Before(c2)
	}
	return pInfo1.Timestamp.Before(pInfo2.Timestamp)
}

// PodPriority returns spec.priority, or 0 when the admission plugin that
// resolves priorityClassName has not set it. Mirrors
// k8s.io/component-helpers/scheduling/corev1.PodPriority.
func PodPriority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}
