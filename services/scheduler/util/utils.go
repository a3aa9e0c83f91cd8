// Package util holds what the scheduler and its plugins share for writing to
// pods: the status patch and the condition update. Mirrors kube-scheduler's
// pkg/scheduler/util.
package util

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// PatchPodStatus sends the strategic-merge patch that turns oldStatus into
// newStatus to pods/status, retrying while the apiserver is unreachable or
// answers 500/503. An empty patch sends nothing. Mirrors kube-scheduler's
// util.PatchPodStatus (pkg/scheduler/util/utils.go).
func PatchPodStatus(ctx context.Context, client kubernetes.Interface, name, namespace string, oldStatus, newStatus *v1.PodStatus) error {
	oldData, err := json.Marshal(v1.Pod{Status: *oldStatus})
	if err != nil {
		return fmt.Errorf("marshalling old status of pod %s/%s: %w", namespace, name, err)
	}
	newData, err := json.Marshal(v1.Pod{Status: *newStatus})
	if err != nil {
		return fmt.Errorf("marshalling new status of pod %s/%s: %w", namespace, name, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, &v1.Pod{})
	if err != nil {
		return fmt.Errorf("computing status patch of pod %s/%s: %w", namespace, name, err)
	}
	if string(patch) == "{}" {
		return nil
	}
	return retry.OnError(retry.DefaultBackoff, Retriable, func() error {
		_, err := client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
}

// Retriable reports whether an API call may succeed if tried again: the
// apiserver was unreachable or failed internally. Mirrors kube-scheduler's
// util.Retriable.
func Retriable(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		utilnet.IsConnectionRefused(err)
}

// UpdatePodCondition sets condition in status, keeping the old
// lastTransitionTime if the condition's status did not change, and reports
// whether anything changed. Mirrors k8s.io/kubernetes/pkg/api/v1/pod
// UpdatePodCondition.
func UpdatePodCondition(status *v1.PodStatus, condition *v1.PodCondition) bool {
	condition.LastTransitionTime = metav1.Now()
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != condition.Type {
			continue
		}
		if old.Status == condition.Status {
			condition.LastTransitionTime = old.LastTransitionTime
		}
		equal := old.Status == condition.Status &&
			old.Reason == condition.Reason &&
			old.Message == condition.Message &&
			old.ObservedGeneration == condition.ObservedGeneration &&
			old.LastProbeTime.Equal(&condition.LastProbeTime) &&
			old.LastTransitionTime.Equal(&condition.LastTransitionTime)
		status.Conditions[i] = *condition
		return !equal
	}
	status.Conditions = append(status.Conditions, *condition)
	return true
}
