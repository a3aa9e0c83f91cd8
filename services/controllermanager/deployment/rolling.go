package deployment

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// rolloutRolling moves pods from the old ReplicaSets to the new one: it scales the new
// one up as far as maxSurge allows, then the old ones down as far as maxUnavailable
// allows, one step per sync; each step's status change triggers the next. Mirrors
// rolloutRolling.
func (c *Controller) rolloutRolling(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, true)
	if err != nil {
		return err
	}
	allRSs := append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)
	scaledUp, err := c.reconcileNewReplicaSet(ctx, allRSs, newRS, d)
	if err != nil {
		return err
	}
	if scaledUp {
		return c.syncRolloutStatus(ctx, allRSs, newRS, d)
	}
	scaledDown, err := c.reconcileOldReplicaSets(ctx, allRSs, activeReplicaSets(oldRSs), newRS, d)
	if err != nil {
		return err
	}
	if scaledDown {
		return c.syncRolloutStatus(ctx, allRSs, newRS, d)
	}
	if deploymentComplete(d, &d.Status) {
		if err := c.cleanupDeployment(ctx, oldRSs, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, allRSs, newRS, d)
}

// reconcileNewReplicaSet scales the new ReplicaSet towards replicas within maxSurge.
// Mirrors reconcileNewReplicaSet.
func (c *Controller) reconcileNewReplicaSet(ctx context.Context, allRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	current := ptr.Deref(newRS.Spec.Replicas, 0)
	if current == replicas {
		return false, nil
	}
	target := replicas
	if current < replicas {
		target = newRSNewReplicas(d, allRSs, newRS)
	}
	if target == current {
		return false, nil
	}
	_, err := c.scaleReplicaSet(ctx, newRS, target, d)
	return err == nil, err
}

// reconcileOldReplicaSets scales old ReplicaSets down while at least
// replicas-maxUnavailable pods stay available: first their unhealthy pods, then healthy
// ones. Mirrors reconcileOldReplicaSets.
func (c *Controller) reconcileOldReplicaSets(ctx context.Context, allRSs, oldRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	if specReplicas(oldRSs) == 0 {
		return false, nil
	}
	minAvailable := ptr.Deref(d.Spec.Replicas, 0) - maxUnavailable(d)
	newRSUnavailable := ptr.Deref(newRS.Spec.Replicas, 0) - newRS.Status.AvailableReplicas
	maxScaledDown := specReplicas(allRSs) - minAvailable - newRSUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	oldRSs, cleaned, err := c.cleanupUnhealthyReplicas(ctx, oldRSs, d, maxScaledDown)
	if err != nil {
		return false, err
	}
	allRSs = append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)
	scaledDown, err := c.scaleDownOldReplicaSetsForRollingUpdate(ctx, allRSs, oldRSs, d)
	if err != nil {
		return false, err
	}
	return cleaned+scaledDown > 0, nil
}

// cleanupUnhealthyReplicas scales old ReplicaSets down by their unavailable pods,
// oldest first, at most maxCleanup in all. Mirrors cleanupUnhealthyReplicas.
func (c *Controller) cleanupUnhealthyReplicas(ctx context.Context, oldRSs []*appsv1.ReplicaSet, d *appsv1.Deployment, maxCleanup int32) ([]*appsv1.ReplicaSet, int32, error) {
	oldRSs = append([]*appsv1.ReplicaSet(nil), oldRSs...)
	byCreation(oldRSs)
	var total int32
	for i, rs := range oldRSs {
		if total >= maxCleanup {
			break
		}
		size := ptr.Deref(rs.Spec.Replicas, 0)
		if size == 0 || size == rs.Status.AvailableReplicas {
			continue
		}
		down := min(maxCleanup-total, size-rs.Status.AvailableReplicas)
		if down <= 0 {
			continue
		}
		updated, err := c.scaleReplicaSet(ctx, rs, size-down, d)
		if err != nil {
			return nil, total, err
		}
		total += down
		oldRSs[i] = updated
	}
	return oldRSs, total, nil
}

// scaleDownOldReplicaSetsForRollingUpdate scales old ReplicaSets down, oldest first, by
// as many pods as are available beyond replicas-maxUnavailable. Mirrors
// scaleDownOldReplicaSetsForRollingUpdate.
func (c *Controller) scaleDownOldReplicaSetsForRollingUpdate(ctx context.Context, allRSs, oldRSs []*appsv1.ReplicaSet, d *appsv1.Deployment) (int32, error) {
	minAvailable := ptr.Deref(d.Spec.Replicas, 0) - maxUnavailable(d)
	available := availableReplicas(allRSs)
	if available <= minAvailable {
		return 0, nil
	}
	want := available - minAvailable
	oldRSs = append([]*appsv1.ReplicaSet(nil), oldRSs...)
	byCreation(oldRSs)
	var total int32
	for _, rs := range oldRSs {
		if total >= want {
			break
		}
		size := ptr.Deref(rs.Spec.Replicas, 0)
		if size == 0 {
			continue
		}
		down := min(size, want-total)
		if _, err := c.scaleReplicaSet(ctx, rs, size-down, d); err != nil {
			return total, err
		}
		total += down
	}
	return total, nil
}

// rolloutRecreate scales every old ReplicaSet to zero, waits until none of their pods
// is left running, then creates and scales up the new one. Mirrors rolloutRecreate.
func (c *Controller) rolloutRecreate(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet, podMap map[types.UID][]*corev1.Pod) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	allRSs := append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)
	scaledDown := false
	for _, rs := range activeReplicaSets(oldRSs) {
		if _, err := c.scaleReplicaSet(ctx, rs, 0, d); err != nil {
			return err
		}
		scaledDown = true
	}
	if scaledDown || oldPodsRunning(newRS, oldRSs, podMap) {
		return c.syncRolloutStatus(ctx, allRSs, newRS, d)
	}
	if newRS == nil {
		if newRS, oldRSs, err = c.allReplicaSets(ctx, d, rsList, true); err != nil {
			return err
		}
		allRSs = append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)
	}
	if replicas := ptr.Deref(d.Spec.Replicas, 0); ptr.Deref(newRS.Spec.Replicas, 0) != replicas {
		if _, err := c.scaleReplicaSet(ctx, newRS, replicas, d); err != nil {
			return err
		}
	}
	if deploymentComplete(d, &d.Status) {
		if err := c.cleanupDeployment(ctx, oldRSs, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, allRSs, newRS, d)
}

// oldPodsRunning reports whether any pod of an old ReplicaSet may still run: counted in
// their status, or present and not terminal (being deleted included). Mirrors
// oldPodsRunning.
func oldPodsRunning(newRS *appsv1.ReplicaSet, oldRSs []*appsv1.ReplicaSet, podMap map[types.UID][]*corev1.Pod) bool {
	if statusReplicas(oldRSs) > 0 {
		return true
	}
	for uid, pods := range podMap {
		if newRS != nil && newRS.UID == uid {
			continue
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				return true
			}
		}
	}
	return false
}
