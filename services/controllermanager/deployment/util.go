package deployment

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
)

// The annotations and label the controller keeps on Deployments and their ReplicaSets
// (k8s.io/kubernetes/pkg/controller/deployment/util).
const (
	// RevisionAnnotation numbers a ReplicaSet's template among the Deployment's; the
	// Deployment carries its newest ReplicaSet's.
	RevisionAnnotation = "deployment.kubernetes.io/revision"
	// RevisionHistoryAnnotation lists the earlier revisions a rolled-back-to
	// ReplicaSet had, comma-separated.
	RevisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	// DesiredReplicasAnnotation is the Deployment's replicas when the ReplicaSet was
	// last scaled: a ReplicaSet whose value differs marks a scaling event.
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	// MaxReplicasAnnotation is replicas+maxSurge at that time, for proportional scaling.
	MaxReplicasAnnotation = "deployment.kubernetes.io/max-replicas"
	// DefaultDeploymentUniqueLabelKey is the pod-template-hash label that tells one
	// ReplicaSet's pods from another's.
	DefaultDeploymentUniqueLabelKey = appsv1.DefaultDeploymentUniqueLabelKey
	// lastAppliedConfigAnnotation is kubectl apply's; it is not copied to ReplicaSets.
	lastAppliedConfigAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// maxRevHistoryLengthInChars bounds RevisionHistoryAnnotation.
	maxRevHistoryLengthInChars = 2000
)

// Condition reasons, as kube's deployment controller writes them.
const (
	FailedRSCreateReason       = "ReplicaSetCreateError"
	NewReplicaSetReason        = "NewReplicaSetCreated"
	FoundNewRSReason           = "FoundNewReplicaSet"
	NewRSAvailableReason       = "NewReplicaSetAvailable"
	ReplicaSetUpdatedReason    = "ReplicaSetUpdated"
	TimedOutReason             = "ProgressDeadlineExceeded"
	PausedDeployReason         = "DeploymentPaused"
	ResumedDeployReason        = "DeploymentResumed"
	MinimumReplicasAvailable   = "MinimumReplicasAvailable"
	MinimumReplicasUnavailable = "MinimumReplicasUnavailable"
)

// revision parses a ReplicaSet's revision annotation (0 when absent or malformed).
func revision(rs *appsv1.ReplicaSet) int64 {
	v, err := strconv.ParseInt(rs.Annotations[RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// maxRevision is the highest revision among rsList.
func maxRevision(rsList []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rsList {
		m = max(m, revision(rs))
	}
	return m
}

// equalIgnoreHash compares two pod templates ignoring the pod-template-hash label.
// Mirrors EqualIgnoreHash.
func equalIgnoreHash(t1, t2 *corev1.PodTemplateSpec) bool {
	a, b := t1.DeepCopy(), t2.DeepCopy()
	delete(a.Labels, DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, DefaultDeploymentUniqueLabelKey)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// computeHash is the pod-template-hash of a template: an FNV-32a hash of the template
// and the collision count, encoded with the alphabet of generated names. Mirrors
// controller.ComputeHash (which hashes a spew dump; skiff hashes the JSON).
func computeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	data, _ := json.Marshal(template)
	h.Write(data)
	if collisionCount != nil {
		fmt.Fprintf(h, "%d", *collisionCount)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// byCreation sorts ReplicaSets oldest first (name breaks ties).
func byCreation(rsList []*appsv1.ReplicaSet) {
	sort.SliceStable(rsList, func(i, j int) bool {
		a, b := rsList[i], rsList[j]
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// findNewReplicaSet returns the oldest ReplicaSet whose template is d's. Mirrors
// FindNewReplicaSet.
func findNewReplicaSet(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := append([]*appsv1.ReplicaSet(nil), rsList...)
	byCreation(sorted)
	for _, rs := range sorted {
		if equalIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// findOldReplicaSets returns every ReplicaSet but the new one. Mirrors
// FindOldReplicaSets' second result.
func findOldReplicaSets(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	newRS := findNewReplicaSet(d, rsList)
	var old []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if newRS == nil || rs.UID != newRS.UID {
			old = append(old, rs)
		}
	}
	return old
}

// activeReplicaSets are those with spec.replicas > 0 (nil entries dropped).
func activeReplicaSets(rsList []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if rs != nil && ptr.Deref(rs.Spec.Replicas, 0) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// specReplicas sums spec.replicas; statusReplicas, readyReplicas and
// availableReplicas sum the status counts (nil entries count 0).
func specReplicas(rsList []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rsList {
		if rs != nil {
			n += ptr.Deref(rs.Spec.Replicas, 0)
		}
	}
	return n
}

func statusReplicas(rsList []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rsList {
		if rs != nil {
			n += rs.Status.Replicas
		}
	}
	return n
}

func readyReplicas(rsList []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rsList {
		if rs != nil {
			n += rs.Status.ReadyReplicas
		}
	}
	return n
}

func availableReplicas(rsList []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rsList {
		if rs != nil {
			n += rs.Status.AvailableReplicas
		}
	}
	return n
}

// resolveFenceposts turns maxSurge (rounded up) and maxUnavailable (rounded down) into
// pod counts for desired replicas; both zero becomes maxUnavailable 1. Mirrors
// ResolveFenceposts.
func resolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (int32, int32) {
	zero := intstr.FromInt32(0)
	if maxSurge == nil {
		maxSurge = &zero
	}
	if maxUnavailable == nil {
		maxUnavailable = &zero
	}
	surge, _ := intstr.GetScaledValueFromIntOrPercent(maxSurge, int(desired), true)
	unavailable, _ := intstr.GetScaledValueFromIntOrPercent(maxUnavailable, int(desired), false)
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return int32(surge), int32(unavailable)
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType && d.Spec.Strategy.RollingUpdate != nil
}

// maxSurge is d's surge in pods (0 for Recreate). Mirrors MaxSurge.
func maxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	surge, _ := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, ptr.Deref(d.Spec.Replicas, 0))
	return surge
}

// maxUnavailable is how many of d's replicas may be unavailable (0 for Recreate, never
// more than replicas). Mirrors MaxUnavailable.
func maxUnavailable(d *appsv1.Deployment) int32 {
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	if !isRollingUpdate(d) || replicas == 0 {
		return 0
	}
	_, unavailable := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, replicas)
	return min(unavailable, replicas)
}

// hasProgressDeadline reports whether d's progress is tracked.
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// newCondition is a condition updated and transitioned now.
func newCondition(t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, message string) appsv1.DeploymentCondition {
	now := metav1.Now()
	return appsv1.DeploymentCondition{Type: t, Status: status, LastUpdateTime: now, LastTransitionTime: now, Reason: reason, Message: message}
}

func getCondition(status appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

// setCondition replaces the condition of c's type unless status and reason are
// unchanged, keeping the transition time when only the reason changes. Mirrors
// SetDeploymentCondition.
func setCondition(status *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	current := getCondition(*status, c.Type)
	if current != nil && current.Status == c.Status && current.Reason == c.Reason {
		return
	}
	if current != nil && current.Status == c.Status {
		c.LastTransitionTime = current.LastTransitionTime
	}
	removeCondition(status, c.Type)
	status.Conditions = append(status.Conditions, c)
}

func removeCondition(status *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var kept []appsv1.DeploymentCondition
	for _, c := range status.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	status.Conditions = kept
}

// deploymentComplete: every replica updated and available, and the spec observed.
// Mirrors DeploymentComplete.
func deploymentComplete(d *appsv1.Deployment, status *appsv1.DeploymentStatus) bool {
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	return status.UpdatedReplicas == replicas && status.Replicas == replicas &&
		status.AvailableReplicas == replicas && status.ObservedGeneration >= d.Generation
}

// deploymentProgressing: more updated, ready or available pods than before, or fewer
// old ones. Mirrors DeploymentProgressing.
func deploymentProgressing(d *appsv1.Deployment, status *appsv1.DeploymentStatus) bool {
	old := d.Status
	return status.UpdatedReplicas > old.UpdatedReplicas ||
		status.Replicas-status.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		status.ReadyReplicas > old.ReadyReplicas || status.AvailableReplicas > old.AvailableReplicas
}

// deploymentTimedOut: the Progressing condition was last updated more than
// progressDeadlineSeconds ago without completing. Mirrors DeploymentTimedOut.
func deploymentTimedOut(d *appsv1.Deployment, status *appsv1.DeploymentStatus, now time.Time) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	c := getCondition(*status, appsv1.DeploymentProgressing)
	if c == nil || c.Reason == NewRSAvailableReason {
		return false
	}
	if c.Reason == TimedOutReason {
		return true
	}
	return c.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Before(now)
}

// skipCopyAnnotation names the Deployment annotations not copied to ReplicaSets.
func skipCopyAnnotation(key string) bool {
	switch key {
	case lastAppliedConfigAnnotation, RevisionAnnotation, RevisionHistoryAnnotation, DesiredReplicasAnnotation, MaxReplicasAnnotation:
		return true
	}
	return false
}

// copyAnnotations copies d's annotations (kubernetes.io/change-cause among them, which
// kubectl rollout history shows) to rs. It reports whether rs changed.
func copyAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if skipCopyAnnotation(k) || rs.Annotations[k] == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	return changed
}

// setReplicasAnnotations records desired and max replicas on rs; true if changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	d, m := strconv.Itoa(int(desired)), strconv.Itoa(int(maxReplicas))
	if rs.Annotations[DesiredReplicasAnnotation] == d && rs.Annotations[MaxReplicasAnnotation] == m {
		return false
	}
	rs.Annotations[DesiredReplicasAnnotation], rs.Annotations[MaxReplicasAnnotation] = d, m
	return true
}

// setNewReplicaSetAnnotations copies d's annotations to the new ReplicaSet and raises
// its revision to newRevision, remembering the revision it had (a rollback) in
// revision-history. A ReplicaSet about to be created also gets the replicas
// annotations. Reports whether rs changed. Mirrors SetNewReplicaSetAnnotations.
func setNewReplicaSetAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision int64, exists bool) bool {
	changed := copyAnnotations(d, rs)
	oldRevision := rs.Annotations[RevisionAnnotation]
	oldRevisionInt, err := strconv.ParseInt(oldRevision, 10, 64)
	if err != nil {
		if oldRevision != "" {
			return false
		}
		oldRevisionInt = 0
	}
	if oldRevisionInt < newRevision {
		rs.Annotations[RevisionAnnotation] = strconv.FormatInt(newRevision, 10)
		changed = true
		if oldRevision != "" {
			history := rs.Annotations[RevisionHistoryAnnotation]
			if history == "" {
				history = oldRevision
			} else {
				history += "," + oldRevision
				for len(history) > maxRevHistoryLengthInChars {
					i := strings.Index(history, ",")
					if i < 0 {
						break
					}
					history = history[i+1:]
				}
			}
			rs.Annotations[RevisionHistoryAnnotation] = history
		}
	}
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	if !exists && setReplicasAnnotations(rs, replicas, replicas+maxSurge(d)) {
		changed = true
	}
	return changed
}

// newRSNewReplicas is how many replicas the new ReplicaSet may have now: for
// RollingUpdate as many as keep the total at most replicas+maxSurge (and never more
// than replicas); for Recreate all of them. Mirrors NewRSNewReplicas.
func newRSNewReplicas(d *appsv1.Deployment, allRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	replicas := ptr.Deref(d.Spec.Replicas, 0)
	if !isRollingUpdate(d) {
		return replicas
	}
	current := specReplicas(allRSs)
	maxTotal := replicas + maxSurge(d)
	newReplicas := ptr.Deref(newRS.Spec.Replicas, 0)
	if current >= maxTotal {
		return newReplicas
	}
	return newReplicas + min(maxTotal-current, replicas-newReplicas)
}
