package kubelet

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// The reason and message of a pod failed for its activeDeadlineSeconds, kube's
// (pkg/kubelet/active_deadline.go).
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// pastActiveDeadline reports whether pod has been active on this node (since the
// status's startTime) for its spec.activeDeadlineSeconds or longer; false when it
// has no deadline or has not started. Mirrors activeDeadlineHandler.pastActiveDeadline.
func pastActiveDeadline(pod *v1.Pod, startTime *time.Time, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || startTime == nil || startTime.IsZero() {
		return false
	}
	return now.Sub(*startTime) >= time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second
}

// podStartTime is the startTime of the status the kubelet holds for pod, else the
// API's.
func (kl *Kubelet) podStartTime(pod *v1.Pod) *time.Time {
	s, ok := kl.statusManager.GetPodStatus(pod.UID)
	if !ok {
		s = pod.Status
	}
	if s.StartTime == nil {
		return nil
	}
	t := s.StartTime.Time
	return &t
}
