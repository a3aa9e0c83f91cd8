package statefulset

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/util/retry"

	"skiff.dev/services/controllermanager/history"
)

// maxBatchSize caps the pods one Parallel batch creates or deletes at once. Kube's.
const maxBatchSize = 500

// statefulSetControl is the core loop of the controller: it reconciles one set's pods
// and revisions and writes its status. Mirrors defaultStatefulSetControl
// (stateful_set_control.go).
type statefulSetControl struct {
	client     kubernetes.Interface
	setLister  appslisters.StatefulSetLister
	podControl *StatefulPodControl
	history    history.Interface
	log        *slog.Logger
}

// ListRevisions lists the revisions set's selector matches that set owns or nobody does.
func (ssc *statefulSetControl) ListRevisions(set *appsv1.StatefulSet) ([]*appsv1.ControllerRevision, error) {
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, err
	}
	return ssc.history.ListControllerRevisions(set, selector)
}

// AdoptOrphanRevisions makes set the controller of each revision.
func (ssc *statefulSetControl) AdoptOrphanRevisions(ctx context.Context, set *appsv1.StatefulSet, revisions []*appsv1.ControllerRevision) error {
	for i := range revisions {
		adopted, err := ssc.history.AdoptControllerRevision(ctx, set, controllerKind, revisions[i])
		if err != nil {
			return err
		}
		revisions[i] = adopted
	}
	return nil
}

// UpdateStatefulSet reconciles set with its claimed pods: it finds or records the
// current and update revisions, creates, recreates and deletes pods (in ordinal order,
// one at a time and only over healthy predecessors for OrderedReady; all at once for
// Parallel), rolls pods to the update revision as the strategy says, writes status, and
// trims the revision history to revisionHistoryLimit. It returns the status it computed.
// Mirrors UpdateStatefulSet.
func (ssc *statefulSetControl) UpdateStatefulSet(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod) (*appsv1.StatefulSetStatus, error) {
	set = set.DeepCopy()
	revisions, err := ssc.ListRevisions(set)
	if err != nil {
		return nil, err
	}
	history.SortControllerRevisions(revisions)
	current, update, status, err := ssc.performUpdate(ctx, set, pods, revisions)
	truncErr := ssc.truncateHistory(ctx, set, pods, revisions, current, update)
	if err != nil {
		return nil, errors.Join(err, truncErr)
	}
	return status, truncErr
}

func (ssc *statefulSetControl) performUpdate(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod,
	revisions []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, *appsv1.ControllerRevision, *appsv1.StatefulSetStatus, error) {
	current, update, collisionCount, err := ssc.getStatefulSetRevisions(ctx, set, revisions)
	if err != nil {
		return current, update, nil, err
	}
	status, err := ssc.updateStatefulSet(ctx, set, current, update, collisionCount, pods)
	if err != nil && status == nil {
		return current, update, nil, err
	}
	statusErr := ssc.updateStatefulSetStatus(ctx, set, status)
	switch {
	case err != nil:
		if statusErr != nil {
			ssc.log.Warn("could not update status", "statefulset", set.Namespace+"/"+set.Name, "err", statusErr)
		}
		return current, update, status, err
	case statusErr != nil:
		return current, update, status, statusErr
	}
	return current, update, status, nil
}

// truncateHistory deletes the oldest revisions that are neither current, nor the
// update revision, nor any pod's, until at most revisionHistoryLimit of them remain.
// revisions must be sorted. Mirrors truncateHistory.
func (ssc *statefulSetControl) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod,
	revisions []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{}
	if current != nil {
		live[current.Name] = true
	}
	if update != nil {
		live[update.Name] = true
	}
	for _, p := range pods {
		live[getPodRevision(p)] = true
	}
	var old []*appsv1.ControllerRevision
	for _, r := range revisions {
		if !live[r.Name] {
			old = append(old, r)
		}
	}
	limit := int(*set.Spec.RevisionHistoryLimit)
	if limit < 0 || len(old) <= limit {
		return nil
	}
	for _, r := range old[:len(old)-limit] {
		if err := ssc.history.DeleteControllerRevision(ctx, r); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// getStatefulSetRevisions returns set's current revision (status.currentRevision's,
// or the update revision for a new set), its update revision (the revision of its
// template: the newest one when unchanged, an older equal one renumbered as newest on
// a rollback, or a new one) and the collision count to persist. Mirrors
// getStatefulSetRevisions.
func (ssc *statefulSetControl) getStatefulSetRevisions(ctx context.Context, set *appsv1.StatefulSet,
	revisions []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, *appsv1.ControllerRevision, int32, error) {
	var collisionCount int32
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	update, err := newRevision(set, nextRevision(revisions), &collisionCount)
	if err != nil {
		return nil, nil, collisionCount, err
	}
	equal := history.FindEqualRevisions(revisions, update)
	switch n := len(equal); {
	case n > 0 && history.EqualRevision(revisions[len(revisions)-1], equal[n-1]):
		update = revisions[len(revisions)-1]
	case n > 0:
		if update, err = ssc.history.UpdateControllerRevision(ctx, equal[n-1], update.Revision); err != nil {
			return nil, nil, collisionCount, err
		}
	default:
		if update, err = ssc.history.CreateControllerRevision(ctx, set, update, &collisionCount); err != nil {
			return nil, nil, collisionCount, err
		}
	}
	var current *appsv1.ControllerRevision
	for _, r := range revisions {
		if r.Name == set.Status.CurrentRevision {
			current = r
			break
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// updateStatus counts pods into status: created pods as replicas, running and ready
// ones as ready (and, ready minReadySeconds, available), live ones by revision as
// current or updated. Mirrors updateStatus and computeReplicaStatus.
func updateStatus(status *appsv1.StatefulSetStatus, minReadySeconds int32, current, update *appsv1.ControllerRevision, podLists ...[]*corev1.Pod) {
	status.Replicas, status.ReadyReplicas, status.AvailableReplicas, status.CurrentReplicas, status.UpdatedReplicas = 0, 0, 0, 0, 0
	for _, list := range podLists {
		for _, pod := range list {
			if isCreated(pod) {
				status.Replicas++
			}
			if isRunningAndReady(pod) {
				status.ReadyReplicas++
				if isRunningAndAvailable(pod, minReadySeconds) {
					status.AvailableReplicas++
				}
			}
			if isCreated(pod) && !isTerminating(pod) {
				revision := getPodRevision(pod)
				if revision == current.Name {
					status.CurrentReplicas++
				}
				if revision == update.Name {
					status.UpdatedReplicas++
				}
			}
		}
	}
}

// updateStatefulSet does one round of work on set's pods and returns the resulting
// status. Mirrors updateStatefulSet (with MaxUnavailableStatefulSet's rolling update
// when rollingUpdate.maxUnavailable is set).
func (ssc *statefulSetControl) updateStatefulSet(ctx context.Context, set *appsv1.StatefulSet, current, update *appsv1.ControllerRevision,
	collisionCount int32, pods []*corev1.Pod) (*appsv1.StatefulSetStatus, error) {
	currentSet, err := ApplyRevision(set, current)
	if err != nil {
		return nil, err
	}
	updateSet, err := ApplyRevision(set, update)
	if err != nil {
		return nil, err
	}
	status := appsv1.StatefulSetStatus{
		ObservedGeneration: set.Generation,
		CurrentRevision:    current.Name,
		UpdateRevision:     update.Name,
		CollisionCount:     &collisionCount,
		Conditions:         set.Status.Conditions,
	}
	updateStatus(&status, set.Spec.MinReadySeconds, current, update, pods)

	// Partition pods into the wanted replicas, by ordinal, and the condemned ones.
	start, end := getStartOrdinal(set), getEndOrdinal(set)
	replicas := make([]*corev1.Pod, int(*set.Spec.Replicas))
	var condemned []*corev1.Pod
	for _, pod := range pods {
		switch ord := getOrdinal(pod); {
		case podInOrdinalRange(pod, set):
			replicas[ord-start] = pod
		case ord >= 0:
			condemned = append(condemned, pod)
		}
	}
	for ord := start; ord <= end; ord++ {
		if replicas[ord-start] == nil {
			replicas[ord-start] = newVersionedStatefulSetPod(currentSet, updateSet, current.Name, update.Name, ord)
		}
	}
	sort.Sort(descendingOrdinal(condemned))

	var firstUnhealthy *corev1.Pod
	for _, p := range replicas {
		if !isHealthy(p) && firstUnhealthy == nil {
			firstUnhealthy = p
		}
	}
	for i := len(condemned) - 1; i >= 0; i-- {
		if !isHealthy(condemned[i]) && firstUnhealthy == nil {
			firstUnhealthy = condemned[i]
		}
	}

	if set.DeletionTimestamp != nil {
		return &status, nil
	}
	monotonic := !allowsBurst(set)

	// Every wanted replica exists, is healthy and has its identity; in OrderedReady
	// mode stop at the first that is not.
	if exit, err := runForAll(replicas, func(i int) (bool, error) {
		return ssc.processReplica(ctx, set, updateSet, monotonic, replicas, i)
	}, monotonic); exit || err != nil {
		updateStatus(&status, set.Spec.MinReadySeconds, current, update, replicas, condemned)
		return &status, err
	}
	// Then scale down, highest ordinal first.
	if exit, err := runForAll(condemned, func(i int) (bool, error) {
		return ssc.processCondemned(ctx, set, firstUnhealthy, monotonic, condemned, i)
	}, monotonic); exit || err != nil {
		updateStatus(&status, set.Spec.MinReadySeconds, current, update, replicas, condemned)
		return &status, err
	}
	updateStatus(&status, set.Spec.MinReadySeconds, current, update, replicas, condemned)

	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return &status, nil // pods take the update revision when someone deletes them
	}
	updateMin := 0
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if ru.Partition != nil {
			updateMin = int(*ru.Partition)
		}
		if ru.MaxUnavailable != nil {
			return ssc.rollWithMaxUnavailable(ctx, set, replicas, current, update, updateMin, status)
		}
	}
	// Delete the highest-ordinal pod at or above the partition that is not at the
	// update revision, one at a time, each after the ones above it are healthy again.
	for target := len(replicas) - 1; target >= updateMin; target-- {
		if getPodRevision(replicas[target]) != update.Name && !isTerminating(replicas[target]) {
			ssc.log.Info("terminating pod for update", "statefulset", set.Namespace+"/"+set.Name, "pod", replicas[target].Name)
			if err := ssc.podControl.DeleteStatefulPod(ctx, set, replicas[target]); err != nil && !apierrors.IsNotFound(err) {
				return &status, err
			}
			uncountCurrent(&status, replicas[target], current)
			return &status, nil
		}
		if !isHealthy(replicas[target]) {
			return &status, nil
		}
	}
	return &status, nil
}

// rollWithMaxUnavailable deletes, highest ordinal first and at or above updateMin, up
// to maxUnavailable minus the already unhealthy replicas of the pods not at the update
// revision. Mirrors updateStatefulSetAfterInvariantEstablished.
func (ssc *statefulSetControl) rollWithMaxUnavailable(ctx context.Context, set *appsv1.StatefulSet, replicas []*corev1.Pod,
	current, update *appsv1.ControllerRevision, updateMin int, status appsv1.StatefulSetStatus) (*appsv1.StatefulSetStatus, error) {
	maxUnavailable, err := getStatefulSetMaxUnavailable(set.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable, int(*set.Spec.Replicas))
	if err != nil {
		return &status, err
	}
	unavailable := 0
	for _, p := range replicas {
		if !isHealthy(p) {
			unavailable++
		}
	}
	if unavailable >= maxUnavailable {
		return &status, nil
	}
	toDelete := maxUnavailable - unavailable
	for target := len(replicas) - 1; target >= updateMin && toDelete > 0; target-- {
		if getPodRevision(replicas[target]) != update.Name && !isTerminating(replicas[target]) {
			if err := ssc.podControl.DeleteStatefulPod(ctx, set, replicas[target]); err != nil && !apierrors.IsNotFound(err) {
				return &status, err
			}
			toDelete--
			uncountCurrent(&status, replicas[target], current)
		}
	}
	return &status, nil
}

// uncountCurrent takes a pod just deleted for update out of status.currentReplicas, if
// it was counted there (kube decrements unconditionally, which goes negative for a pod
// at neither revision, such as an adopted one).
func uncountCurrent(status *appsv1.StatefulSetStatus, pod *corev1.Pod, current *appsv1.ControllerRevision) {
	if getPodRevision(pod) == current.Name && status.CurrentReplicas > 0 {
		status.CurrentReplicas--
	}
}

// processReplica brings the wanted replica i along: a failed or succeeded pod is
// deleted (a new one comes on a later round), a missing one created (ending the round
// in OrderedReady mode), a pending one gets its missing claims, and its identity and
// storage are restored. In OrderedReady mode it reports exit while the replica is
// terminating, not running and ready, or not yet available. Mirrors processReplica.
func (ssc *statefulSetControl) processReplica(ctx context.Context, set, updateSet *appsv1.StatefulSet, monotonic bool, replicas []*corev1.Pod, i int) (bool, error) {
	pod := replicas[i]
	if isFailed(pod) || isSucceeded(pod) {
		if pod.DeletionTimestamp == nil {
			if err := ssc.podControl.DeleteStatefulPod(ctx, set, pod); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	if !isCreated(pod) {
		if err := ssc.podControl.CreateStatefulPod(ctx, set, pod); err != nil {
			return true, err
		}
		if monotonic {
			return true, nil
		}
	}
	if isPending(pod) {
		if err := ssc.podControl.createPersistentVolumeClaims(ctx, set, pod); err != nil {
			return true, err
		}
	}
	if monotonic && (isTerminating(pod) || !isRunningAndReady(pod) || !isRunningAndAvailable(pod, set.Spec.MinReadySeconds)) {
		return true, nil
	}
	if !isCreated(pod) || (identityMatches(set, pod) && storageMatches(set, pod)) {
		return false, nil
	}
	return false, ssc.podControl.UpdateStatefulPod(ctx, updateSet, pod.DeepCopy())
}

// processCondemned deletes condemned pod i. In OrderedReady mode it waits (exit) for a
// terminating pod, and for a pod that is not running, ready and available unless it is
// the first unhealthy one; it always ends the round after a delete. Mirrors
// processCondemned.
func (ssc *statefulSetControl) processCondemned(ctx context.Context, set *appsv1.StatefulSet, firstUnhealthy *corev1.Pod, monotonic bool, condemned []*corev1.Pod, i int) (bool, error) {
	pod := condemned[i]
	if isTerminating(pod) {
		return monotonic, nil
	}
	if monotonic && pod != firstUnhealthy && (!isRunningAndReady(pod) || !isRunningAndAvailable(pod, set.Spec.MinReadySeconds)) {
		return true, nil
	}
	if err := ssc.podControl.UpdatePodClaimForRetentionPolicy(ctx, set, pod); err != nil {
		return true, err
	}
	ssc.log.Info("terminating pod for scale down", "statefulset", set.Namespace+"/"+set.Name, "pod", pod.Name)
	return true, ssc.podControl.DeleteStatefulPod(ctx, set, pod)
}

// runForAll calls fn for each pod: in order, stopping at the first exit or error, when
// monotonic; else in slow-start batches (1, 2, 4, ... at most maxBatchSize), stopping
// after a batch with errors. Mirrors runForAll and slowStartBatch.
func runForAll(pods []*corev1.Pod, fn func(i int) (bool, error), monotonic bool) (bool, error) {
	if monotonic {
		for i := range pods {
			if exit, err := fn(i); exit || err != nil {
				return true, err
			}
		}
		return false, nil
	}
	next := 0
	for batch := min(len(pods), 1); batch > 0; batch = min(2*batch, len(pods)-next, maxBatchSize) {
		errs := make([]error, batch)
		var wg sync.WaitGroup
		for k := 0; k < batch; k++ {
			wg.Add(1)
			go func(k, i int) {
				defer wg.Done()
				_, errs[k] = fn(i)
			}(k, next+k)
		}
		wg.Wait()
		next += batch
		if err := errors.Join(errs...); err != nil {
			return true, err
		}
	}
	return false, nil
}

// updateStatefulSetStatus completes a finished rolling update in status and writes it
// through statefulsets/status when it says something new, retrying conflicts with the
// cached set. Mirrors updateStatefulSetStatus and realStatefulSetStatusUpdater.
func (ssc *statefulSetControl) updateStatefulSetStatus(ctx context.Context, set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) error {
	completeRollingUpdate(set, status)
	if !inconsistentStatus(set, status) {
		return nil
	}
	set = set.DeepCopy()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set.Status = *status
		_, err := ssc.client.AppsV1().StatefulSets(set.Namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if cached, getErr := ssc.setLister.StatefulSets(set.Namespace).Get(set.Name); getErr == nil {
			set = cached.DeepCopy()
		}
		return err
	})
}
