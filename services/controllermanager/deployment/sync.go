package deployment

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/controllerref"
)

// updateStatus writes d's status (and annotations, which deployments/status may change)
// and refreshes d from the answer, so later writes in the same sync are not stale.
func (c *Controller) updateStatus(ctx context.Context, d *appsv1.Deployment) error {
	updated, err := c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	*d = *updated
	return nil
}

// allReplicaSets finds d's new ReplicaSet (creating it when create is set) and the old
// ones, syncing the revision annotations. Mirrors getAllReplicaSetsAndSyncRevision.
func (c *Controller) allReplicaSets(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	oldRSs := findOldReplicaSets(d, rsList)
	newRS, err := c.getNewReplicaSet(ctx, d, rsList, oldRSs, create)
	return newRS, oldRSs, err
}

// getNewReplicaSet returns the ReplicaSet of d's current template: the existing one with
// its annotations brought up to date, or (with create) a new one named
// <deployment>-<pod-template-hash>. A name taken by a ReplicaSet with another template
// is a hash collision: status.collisionCount goes up and the next sync hashes anew.
// Mirrors getNewReplicaSet.
func (c *Controller) getNewReplicaSet(ctx context.Context, d *appsv1.Deployment, rsList, oldRSs []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, error) {
	existing := findNewReplicaSet(d, rsList)
	newRevision := maxRevision(oldRSs) + 1
	if existing != nil {
		rs := existing.DeepCopy()
		annotationsUpdated := setNewReplicaSetAnnotations(d, rs, newRevision, true)
		if annotationsUpdated || rs.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			rs.Spec.MinReadySeconds = d.Spec.MinReadySeconds
			return c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, rs, metav1.UpdateOptions{})
		}
		needsUpdate := setDeploymentRevision(d, rs.Annotations[RevisionAnnotation])
		if hasProgressDeadline(d) && getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, FoundNewRSReason, fmt.Sprintf("Found new replica set %q", rs.Name)))
			needsUpdate = true
		}
		if needsUpdate {
			if err := c.updateStatus(ctx, d); err != nil {
				return nil, err
			}
		}
		return rs, nil
	}
	if !create {
		return nil, nil
	}

	template := d.Spec.Template.DeepCopy()
	hash := computeHash(template, d.Status.CollisionCount)
	template.Labels = withLabel(d.Spec.Template.Labels, DefaultDeploymentUniqueLabelKey, hash)
	selector := d.Spec.Selector.DeepCopy()
	selector.MatchLabels = withLabel(selector.MatchLabels, DefaultDeploymentUniqueLabelKey, hash)
	newRS := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-" + hash, Namespace: d.Namespace, Labels: template.Labels,
			OwnerReferences: []metav1.OwnerReference{*controllerref.NewControllerRef(d, controllerKind)},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(0)), MinReadySeconds: d.Spec.MinReadySeconds, Selector: selector, Template: *template},
	}
	replicas := newRSNewReplicas(d, append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS), newRS)
	newRS.Spec.Replicas = &replicas
	setNewReplicaSetAnnotations(d, newRS, newRevision, false)

	created, err := c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, newRS, metav1.CreateOptions{})
	alreadyExists := false
	switch {
	case apierrors.IsAlreadyExists(err):
		alreadyExists = true
		rs, getErr := c.rsLister.ReplicaSets(d.Namespace).Get(newRS.Name)
		if getErr != nil {
			return nil, getErr
		}
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.UID == d.UID && equalIgnoreHash(&d.Spec.Template, &rs.Spec.Template) {
			created, err = rs, nil
			break
		}
		if d.Status.CollisionCount == nil {
			d.Status.CollisionCount = ptr.To(int32(0))
		}
		*d.Status.CollisionCount++
		if uerr := c.updateStatus(ctx, d); uerr != nil {
			return nil, uerr
		}
		return nil, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, err
	case err != nil:
		msg := fmt.Sprintf("Failed to create new replica set %q: %v", newRS.Name, err)
		if hasProgressDeadline(d) {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, FailedRSCreateReason, msg))
			_ = c.updateStatus(ctx, d)
		}
		c.recorder.Event(d, corev1.EventTypeWarning, FailedRSCreateReason, msg)
		return nil, err
	}
	if !alreadyExists && replicas > 0 {
		c.recorder.Eventf(d, corev1.EventTypeNormal, "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d", created.Name, replicas)
	}
	needsUpdate := setDeploymentRevision(d, strconv.FormatInt(newRevision, 10))
	if !alreadyExists && hasProgressDeadline(d) {
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, NewReplicaSetReason, fmt.Sprintf("Created new replica set %q", created.Name)))
		needsUpdate = true
	}
	if needsUpdate {
		if err := c.updateStatus(ctx, d); err != nil {
			return nil, err
		}
	}
	return created, nil
}

func withLabel(m map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out[key] = value
	return out
}

// setDeploymentRevision sets d's revision annotation; true if it changed.
func setDeploymentRevision(d *appsv1.Deployment, revision string) bool {
	if d.Annotations[RevisionAnnotation] == revision {
		return false
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[RevisionAnnotation] = revision
	return true
}

// isScalingEvent reports whether d's replicas changed since its active ReplicaSets were
// last scaled (their desired-replicas annotation). Mirrors isScalingEvent.
func (c *Controller) isScalingEvent(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (bool, error) {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return false, err
	}
	for _, rs := range activeReplicaSets(append(oldRSs, newRS)) {
		desired, err := strconv.Atoi(rs.Annotations[DesiredReplicasAnnotation])
		if err != nil {
			continue
		}
		if int32(desired) != ptr.Deref(d.Spec.Replicas, 0) {
			return true, nil
		}
	}
	return false, nil
}

// sync scales without rolling out: for a paused Deployment and for a scaling event.
// Mirrors DeploymentController.sync.
func (c *Controller) sync(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	if err := c.scale(ctx, d, newRS, oldRSs); err != nil {
		return err
	}
	if d.Spec.Paused {
		if err := c.cleanupDeployment(ctx, oldRSs, d); err != nil {
			return err
		}
	}
	return c.syncDeploymentStatus(ctx, append(oldRSs, newRS), newRS, d)
}

// scale brings the ReplicaSets' sizes to d's replicas: the only active one takes them
// all; with a saturated new ReplicaSet the old ones go to zero; otherwise (mid-rollout)
// the change is spread over the active ReplicaSets in proportion to their sizes, within
// replicas+maxSurge. Mirrors DeploymentController.scale.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, oldRSs []*appsv1.ReplicaSet) error {
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	if rs := activeOrLatest(newRS, oldRSs); rs != nil {
		if ptr.Deref(rs.Spec.Replicas, 0) == replicas {
			return nil
		}
		_, err := c.scaleReplicaSet(ctx, rs, replicas, d)
		return err
	}
	if newRS != nil && ptr.Deref(newRS.Spec.Replicas, 0) == replicas && newRS.Status.AvailableReplicas == replicas {
		for _, old := range activeReplicaSets(oldRSs) {
			if _, err := c.scaleReplicaSet(ctx, old, 0, d); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	allRSs := activeReplicaSets(append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS))
	allowedSize := int32(0)
	if replicas > 0 {
		allowedSize = replicas + maxSurge(d)
	}
	toAdd := allowedSize - specReplicas(allRSs)
	// Scaling up favours the largest (then newest) ReplicaSets, scaling down the
	// largest (then oldest), as kube's ReplicaSetsBySizeNewer/Older do.
	sort.SliceStable(allRSs, func(i, j int) bool {
		a, b := allRSs[i], allRSs[j]
		if ptr.Deref(a.Spec.Replicas, 0) != ptr.Deref(b.Spec.Replicas, 0) {
			return ptr.Deref(a.Spec.Replicas, 0) > ptr.Deref(b.Spec.Replicas, 0)
		}
		if toAdd > 0 {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
	sizes := make([]int32, len(allRSs))
	added := int32(0)
	for i, rs := range allRSs {
		sizes[i] = ptr.Deref(rs.Spec.Replicas, 0)
		if toAdd != 0 {
			p := proportion(rs, d, toAdd, added)
			sizes[i] += p
			added += p
		}
	}
	if toAdd != 0 && len(allRSs) > 0 {
		sizes[0] = max(sizes[0]+toAdd-added, 0)
	}
	for i, rs := range allRSs {
		if _, err := c.scaleReplicaSet(ctx, rs, sizes[i], d); err != nil {
			return err
		}
	}
	return nil
}

// proportion is rs's share of toAdd replicas. Mirrors GetProportion and
// getReplicaSetFraction.
func proportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	size := ptr.Deref(rs.Spec.Replicas, 0)
	if size == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	var fraction int32
	if replicas == 0 {
		fraction = -size
	} else {
		total := replicas + maxSurge(d)
		annotated, err := strconv.Atoi(rs.Annotations[MaxReplicasAnnotation])
		if err != nil || annotated == 0 {
			annotated = int(d.Status.Replicas)
		}
		if annotated == 0 {
			return 0
		}
		fraction = int32(math.Round(float64(size*total)/float64(annotated))) - size
	}
	allowed := toAdd - added
	if toAdd > 0 {
		return min(fraction, allowed)
	}
	return max(fraction, allowed)
}

// activeOrLatest returns the only active ReplicaSet, the newest one when none is
// active, or nil when several are. Mirrors FindActiveOrLatest.
func activeOrLatest(newRS *appsv1.ReplicaSet, oldRSs []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(oldRSs) == 0 {
		return nil
	}
	sorted := append([]*appsv1.ReplicaSet(nil), oldRSs...)
	byCreation(sorted)
	active := activeReplicaSets(append(sorted, newRS))
	switch len(active) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return sorted[len(sorted)-1]
	case 1:
		return active[0]
	}
	return nil
}

// scaleReplicaSet sets rs's replicas and replicas annotations, recording a
// ScalingReplicaSet event when the size changes. Mirrors scaleReplicaSetAndRecordEvent.
func (c *Controller) scaleReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, newScale int32, d *appsv1.Deployment) (*appsv1.ReplicaSet, error) {
	oldScale := ptr.Deref(rs.Spec.Replicas, 0)
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	cp := rs.DeepCopy()
	annotationsChanged := setReplicasAnnotations(cp, replicas, replicas+maxSurge(d))
	if oldScale == newScale && !annotationsChanged {
		return rs, nil
	}
	cp.Spec.Replicas = &newScale
	updated, err := c.client.AppsV1().ReplicaSets(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	if oldScale != newScale {
		direction := "up"
		if newScale < oldScale {
			direction = "down"
		}
		c.recorder.Eventf(d, corev1.EventTypeNormal, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d", direction, rs.Name, oldScale, newScale)
	}
	return updated, nil
}

// cleanupDeployment deletes the oldest idle old ReplicaSets beyond
// revisionHistoryLimit. Mirrors cleanupDeployment.
func (c *Controller) cleanupDeployment(ctx context.Context, oldRSs []*appsv1.ReplicaSet, d *appsv1.Deployment) error {
	if d.Spec.RevisionHistoryLimit == nil {
		return nil
	}
	var cleanable []*appsv1.ReplicaSet
	for _, rs := range oldRSs {
		if rs != nil && rs.DeletionTimestamp == nil {
			cleanable = append(cleanable, rs)
		}
	}
	diff := len(cleanable) - int(*d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return nil
	}
	sort.SliceStable(cleanable, func(i, j int) bool {
		if revision(cleanable[i]) != revision(cleanable[j]) {
			return revision(cleanable[i]) < revision(cleanable[j])
		}
		return cleanable[i].CreationTimestamp.Before(&cleanable[j].CreationTimestamp)
	})
	for _, rs := range cleanable[:diff] {
		if rs.Status.Replicas != 0 || ptr.Deref(rs.Spec.Replicas, 0) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		err := c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rs.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// calculateStatus sums the ReplicaSets' counts into d's status and sets the Available
// condition. Mirrors calculateStatus.
func calculateStatus(allRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) appsv1.DeploymentStatus {
	available := availableReplicas(allRSs)
	unavailable := max(specReplicas(allRSs)-available, 0)
	status := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            statusReplicas(allRSs),
		UpdatedReplicas:     statusReplicas([]*appsv1.ReplicaSet{newRS}),
		ReadyReplicas:       readyReplicas(allRSs),
		AvailableReplicas:   available,
		UnavailableReplicas: unavailable,
		CollisionCount:      d.Status.CollisionCount,
		Conditions:          append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...),
	}
	if available >= ptr.Deref(d.Spec.Replicas, 0)-maxUnavailable(d) {
		setCondition(&status, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, MinimumReplicasAvailable, "Deployment has minimum availability."))
	} else {
		setCondition(&status, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, MinimumReplicasUnavailable, "Deployment does not have minimum availability."))
	}
	return status
}

// syncDeploymentStatus writes d's status if it changed.
func (c *Controller) syncDeploymentStatus(ctx context.Context, allRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	status := calculateStatus(allRSs, newRS, d)
	if apiequality.Semantic.DeepEqual(d.Status, status) {
		return nil
	}
	d.Status = status
	return c.updateStatus(ctx, d)
}

// syncStatusOnly only writes status: for a Deployment being deleted.
func (c *Controller) syncStatusOnly(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	return c.syncDeploymentStatus(ctx, append(oldRSs, newRS), newRS, d)
}

// syncRolloutStatus writes status with the Progressing condition: True
// NewReplicaSetAvailable once complete, True ReplicaSetUpdated while progressing, False
// ProgressDeadlineExceeded when stuck longer than progressDeadlineSeconds. Mirrors
// syncRolloutStatus.
func (c *Controller) syncRolloutStatus(ctx context.Context, allRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	status := calculateStatus(allRSs, newRS, d)
	if !hasProgressDeadline(d) {
		removeCondition(&status, appsv1.DeploymentProgressing)
	}
	current := getCondition(d.Status, appsv1.DeploymentProgressing)
	complete := status.Replicas == status.UpdatedReplicas && current != nil && current.Reason == NewRSAvailableReason
	if hasProgressDeadline(d) && !complete {
		subject := fmt.Sprintf("Deployment %q", d.Name)
		if newRS != nil {
			subject = fmt.Sprintf("ReplicaSet %q", newRS.Name)
		}
		switch {
		case deploymentComplete(d, &status):
			setCondition(&status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, NewRSAvailableReason, subject+" has successfully progressed."))
		case deploymentProgressing(d, &status):
			cond := newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReplicaSetUpdatedReason, subject+" is progressing.")
			if current != nil && current.Status == corev1.ConditionTrue {
				cond.LastTransitionTime = current.LastTransitionTime
			}
			removeCondition(&status, appsv1.DeploymentProgressing)
			status.Conditions = append(status.Conditions, cond)
		case deploymentTimedOut(d, &status, time.Now()):
			setCondition(&status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, TimedOutReason, subject+" has timed out progressing."))
		}
	}
	if failure := replicaFailure(allRSs); failure != nil {
		setCondition(&status, *failure)
	} else {
		removeCondition(&status, appsv1.DeploymentReplicaFailure)
	}
	if apiequality.Semantic.DeepEqual(d.Status, status) {
		c.requeueStuckDeployment(d, status)
		return nil
	}
	d.Status = status
	return c.updateStatus(ctx, d)
}

// replicaFailure lifts a ReplicaSet's ReplicaFailure condition to the Deployment.
func replicaFailure(allRSs []*appsv1.ReplicaSet) *appsv1.DeploymentCondition {
	for _, rs := range allRSs {
		if rs == nil {
			continue
		}
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure {
				return &appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: c.Status,
					LastUpdateTime: c.LastTransitionTime, LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message}
			}
		}
	}
	return nil
}

// requeueStuckDeployment checks an unfinished rollout again when its progress deadline
// passes, since nothing else would wake the controller then. Mirrors
// requeueStuckDeployment.
func (c *Controller) requeueStuckDeployment(d *appsv1.Deployment, status appsv1.DeploymentStatus) {
	current := getCondition(d.Status, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || current == nil || current.Reason == NewRSAvailableReason || current.Reason == TimedOutReason ||
		deploymentComplete(d, &status) {
		return
	}
	after := time.Until(current.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second))
	key := d.Namespace + "/" + d.Name
	if after < time.Second {
		c.queue.AddRateLimited(key)
		return
	}
	c.queue.AddAfter(key, after+time.Second)
}

// checkPausedConditions sets Progressing Unknown DeploymentPaused when paused and
// DeploymentResumed when resumed, unless the rollout already timed out. Mirrors
// checkPausedConditions.
func (c *Controller) checkPausedConditions(ctx context.Context, d *appsv1.Deployment) error {
	if !hasProgressDeadline(d) {
		return nil
	}
	cond := getCondition(d.Status, appsv1.DeploymentProgressing)
	if cond != nil && cond.Reason == TimedOutReason {
		return nil
	}
	pausedCondExists := cond != nil && cond.Reason == PausedDeployReason
	switch {
	case d.Spec.Paused && !pausedCondExists:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, PausedDeployReason, "Deployment is paused"))
	case !d.Spec.Paused && pausedCondExists:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ResumedDeployReason, "Deployment is resumed"))
	default:
		return nil
	}
	return c.updateStatus(ctx, d)
}
