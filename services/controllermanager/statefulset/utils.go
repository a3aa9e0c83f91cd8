package statefulset

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/history"
	"skiff.dev/services/controllermanager/podcontrol"
)

// statefulPodRegex splits a pod name into its set's name and its ordinal.
var statefulPodRegex = regexp.MustCompile("(.*)-([0-9]+)$")

// getParentNameAndOrdinal returns the set name and ordinal a pod's name carries, or ""
// and -1 when the name is not <set>-<ordinal>. Mirrors getParentNameAndOrdinal.
func getParentNameAndOrdinal(pod *corev1.Pod) (string, int) {
	m := statefulPodRegex.FindStringSubmatch(pod.Name)
	if len(m) < 3 {
		return "", -1
	}
	ordinal := -1
	if i, err := strconv.ParseInt(m[2], 10, 32); err == nil {
		ordinal = int(i)
	}
	return m[1], ordinal
}

func getParentName(pod *corev1.Pod) string {
	parent, _ := getParentNameAndOrdinal(pod)
	return parent
}

func getOrdinal(pod *corev1.Pod) int {
	_, ordinal := getParentNameAndOrdinal(pod)
	return ordinal
}

// getStartOrdinal is spec.ordinals.start, 0 when unset.
func getStartOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

// getEndOrdinal is the highest ordinal the set wants (start+replicas-1).
func getEndOrdinal(set *appsv1.StatefulSet) int {
	return getStartOrdinal(set) + int(*set.Spec.Replicas) - 1
}

// podInOrdinalRange reports whether the pod's ordinal is one the set wants.
func podInOrdinalRange(pod *corev1.Pod, set *appsv1.StatefulSet) bool {
	ordinal := getOrdinal(pod)
	return ordinal >= getStartOrdinal(set) && ordinal <= getEndOrdinal(set)
}

// getPodName is "<set>-<ordinal>".
func getPodName(set *appsv1.StatefulSet, ordinal int) string {
	return fmt.Sprintf("%s-%d", set.Name, ordinal)
}

// getPersistentVolumeClaimName is "<template>-<set>-<ordinal>".
func getPersistentVolumeClaimName(set *appsv1.StatefulSet, claim *corev1.PersistentVolumeClaim, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", claim.Name, set.Name, ordinal)
}

// isMemberOf reports whether the pod's name makes it one of set's pods.
func isMemberOf(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	return getParentName(pod) == set.Name
}

// identityMatches reports whether the pod has the name, namespace and pod-name label its
// ordinal gives it in set. Mirrors identityMatches.
func identityMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	parent, ordinal := getParentNameAndOrdinal(pod)
	return ordinal >= 0 && set.Name == parent && pod.Name == getPodName(set, ordinal) &&
		pod.Namespace == set.Namespace && pod.Labels[appsv1.StatefulSetPodNameLabel] == pod.Name
}

// storageMatches reports whether each volume claim template is mounted in the pod as a
// volume of the template's name using the pod's claim. Mirrors storageMatches.
func storageMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	ordinal := getOrdinal(pod)
	if ordinal < 0 {
		return false
	}
	volumes := make(map[string]corev1.Volume, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for i := range set.Spec.VolumeClaimTemplates {
		claim := &set.Spec.VolumeClaimTemplates[i]
		v, found := volumes[claim.Name]
		if !found || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != getPersistentVolumeClaimName(set, claim, ordinal) {
			return false
		}
	}
	return true
}

// getPersistentVolumeClaims returns the claims the pod needs, by template name: each
// template named for the pod's ordinal, in set's namespace, with the selector's
// matchLabels added to its labels. Mirrors getPersistentVolumeClaims.
func getPersistentVolumeClaims(set *appsv1.StatefulSet, pod *corev1.Pod) map[string]corev1.PersistentVolumeClaim {
	ordinal := getOrdinal(pod)
	claims := make(map[string]corev1.PersistentVolumeClaim, len(set.Spec.VolumeClaimTemplates))
	for i := range set.Spec.VolumeClaimTemplates {
		claim := set.Spec.VolumeClaimTemplates[i].DeepCopy()
		claim.Name = getPersistentVolumeClaimName(set, claim, ordinal)
		claim.Namespace = set.Namespace
		if claim.Labels == nil {
			claim.Labels = map[string]string{}
		}
		for k, v := range set.Spec.Selector.MatchLabels {
			claim.Labels[k] = v
		}
		claim.Status = corev1.PersistentVolumeClaimStatus{}
		claims[set.Spec.VolumeClaimTemplates[i].Name] = *claim
	}
	return claims
}

// updateStorage mounts the pod's claims as volumes named after their templates, in place
// of any template volume of the same name. Mirrors updateStorage.
func updateStorage(set *appsv1.StatefulSet, pod *corev1.Pod) {
	claims := getPersistentVolumeClaims(set, pod)
	volumes := make([]corev1.Volume, 0, len(claims)+len(pod.Spec.Volumes))
	for i := range set.Spec.VolumeClaimTemplates {
		name := set.Spec.VolumeClaimTemplates[i].Name
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claims[name].Name},
		}})
	}
	for _, v := range pod.Spec.Volumes {
		if _, ok := claims[v.Name]; !ok {
			volumes = append(volumes, v)
		}
	}
	pod.Spec.Volumes = volumes
}

// initIdentity gives a new pod its identity: updateIdentity, plus hostname (the pod's
// name) and subdomain (serviceName), which a headless Service of that name turns into
// the stable DNS name <pod>.<service>.<namespace>.svc. Mirrors initIdentity.
func initIdentity(set *appsv1.StatefulSet, pod *corev1.Pod) {
	updateIdentity(set, pod)
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
}

// updateIdentity sets the pod's name and namespace from its ordinal and the
// statefulset.kubernetes.io/pod-name and apps.kubernetes.io/pod-index labels. Mirrors
// updateIdentity (with PodIndexLabel on, as in 1.32).
func updateIdentity(set *appsv1.StatefulSet, pod *corev1.Pod) {
	ordinal := getOrdinal(pod)
	pod.Name = getPodName(set, ordinal)
	pod.Namespace = set.Namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
}

// isRunningAndReady: phase Running and Ready=True.
func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && podcontrol.IsReady(pod)
}

// isRunningAndAvailable: ready for at least minReadySeconds.
func isRunningAndAvailable(pod *corev1.Pod, minReadySeconds int32) bool {
	return podcontrol.IsAvailable(pod, minReadySeconds, time.Now())
}

// isCreated: the pod exists in the apiserver (it has a phase; a pod built by
// newVersionedStatefulSetPod has none).
func isCreated(pod *corev1.Pod) bool { return pod.Status.Phase != "" }

func isPending(pod *corev1.Pod) bool     { return pod.Status.Phase == corev1.PodPending }
func isFailed(pod *corev1.Pod) bool      { return pod.Status.Phase == corev1.PodFailed }
func isSucceeded(pod *corev1.Pod) bool   { return pod.Status.Phase == corev1.PodSucceeded }
func isTerminating(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }

// isHealthy: running, ready and not being deleted.
func isHealthy(pod *corev1.Pod) bool { return isRunningAndReady(pod) && !isTerminating(pod) }

// allowsBurst: podManagementPolicy Parallel.
func allowsBurst(set *appsv1.StatefulSet) bool {
	return set.Spec.PodManagementPolicy == appsv1.ParallelPodManagement
}

// setPodRevision labels the pod with its revision's name (controller-revision-hash).
func setPodRevision(pod *corev1.Pod, revision string) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetRevisionLabel] = revision
}

// getPodRevision is the pod's controller-revision-hash label.
func getPodRevision(pod *corev1.Pod) string { return pod.Labels[appsv1.StatefulSetRevisionLabel] }

// newStatefulSetPod builds set's pod for ordinal from its template: a controller
// reference to set, the name <set>-<ordinal>, its identity and its claims' volumes.
// Mirrors newStatefulSetPod.
func newStatefulSetPod(set *appsv1.StatefulSet, ordinal int) *corev1.Pod {
	pod := podcontrol.PodFromTemplate(&set.Spec.Template, set.Name, controllerref.NewControllerRef(set, controllerKind))
	pod.Name = getPodName(set, ordinal)
	initIdentity(set, pod)
	updateStorage(set, pod)
	return pod
}

// newVersionedStatefulSetPod builds the pod for ordinal at the revision it should have:
// below the RollingUpdate partition (or, without rollingUpdate, below
// status.currentReplicas) the current revision, else the update revision. Mirrors
// newVersionedStatefulSetPod.
func newVersionedStatefulSetPod(currentSet, updateSet *appsv1.StatefulSet, currentRevision, updateRevision string, ordinal int) *corev1.Pod {
	strategy := currentSet.Spec.UpdateStrategy
	start := getStartOrdinal(currentSet)
	if (strategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && strategy.RollingUpdate == nil && ordinal < start+int(currentSet.Status.CurrentReplicas)) ||
		(strategy.RollingUpdate != nil && strategy.RollingUpdate.Partition != nil && ordinal < start+int(*strategy.RollingUpdate.Partition)) {
		pod := newStatefulSetPod(currentSet, ordinal)
		setPodRevision(pod, currentRevision)
		return pod
	}
	pod := newStatefulSetPod(updateSet, ordinal)
	setPodRevision(pod, updateRevision)
	return pod
}

// getPatch is what a revision records of set: its pod template as a strategic merge
// patch that replaces the whole template, {"spec":{"template":{...,"$patch":"replace"}}},
// encoded as kubectl rollout undo and history compute it. Mirrors getPatch.
func getPatch(set *appsv1.StatefulSet) ([]byte, error) {
	data, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	var raw map[string]interface{}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	spec, _ := raw["spec"].(map[string]interface{})
	template, _ := spec["template"].(map[string]interface{})
	if template == nil {
		return nil, fmt.Errorf("statefulset %s/%s has no template", set.Namespace, set.Name)
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"template": template}})
}

// newRevision builds (not creates) set's revision numbered revision, carrying set's
// annotations. Mirrors newRevision.
func newRevision(set *appsv1.StatefulSet, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	patch, err := getPatch(set)
	if err != nil {
		return nil, err
	}
	cr, err := history.NewControllerRevision(set, controllerKind, set.Spec.Template.Labels, runtime.RawExtension{Raw: patch}, revision, collisionCount)
	if err != nil {
		return nil, err
	}
	if cr.Annotations == nil {
		cr.Annotations = map[string]string{}
	}
	for k, v := range set.Annotations {
		cr.Annotations[k] = v
	}
	return cr, nil
}

// ApplyRevision returns a copy of set with revision's template in place of its own.
// Errors: the revision's data is not a patch of a StatefulSet. Mirrors ApplyRevision.
func ApplyRevision(set *appsv1.StatefulSet, revision *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	original, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	patched, err := strategicpatch.StrategicMergePatch(original, revision.Data.Raw, &appsv1.StatefulSet{})
	if err != nil {
		return nil, err
	}
	restored := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, restored); err != nil {
		return nil, err
	}
	return restored, nil
}

// nextRevision is one above the newest of the sorted revisions, or 1.
func nextRevision(revisions []*appsv1.ControllerRevision) int64 {
	if len(revisions) == 0 {
		return 1
	}
	return revisions[len(revisions)-1].Revision + 1
}

// inconsistentStatus reports whether status says something set's stored status does not.
// Mirrors inconsistentStatus.
func inconsistentStatus(set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) bool {
	return status.ObservedGeneration > set.Status.ObservedGeneration ||
		status.Replicas != set.Status.Replicas ||
		status.CurrentReplicas != set.Status.CurrentReplicas ||
		status.ReadyReplicas != set.Status.ReadyReplicas ||
		status.UpdatedReplicas != set.Status.UpdatedReplicas ||
		status.CurrentRevision != set.Status.CurrentRevision ||
		status.AvailableReplicas != set.Status.AvailableReplicas ||
		status.UpdateRevision != set.Status.UpdateRevision ||
		!equalCollisionCount(status.CollisionCount, set.Status.CollisionCount)
}

func equalCollisionCount(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// completeRollingUpdate makes the update revision current once a RollingUpdate has
// every replica updated and ready. Mirrors completeRollingUpdate.
func completeRollingUpdate(set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) {
	replicas := *set.Spec.Replicas
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		status.UpdatedReplicas == replicas && status.ReadyReplicas == replicas && status.Replicas == replicas {
		status.CurrentReplicas = status.UpdatedReplicas
		status.CurrentRevision = status.UpdateRevision
	}
}

// descendingOrdinal sorts pods highest ordinal first.
type descendingOrdinal []*corev1.Pod

func (d descendingOrdinal) Len() int           { return len(d) }
func (d descendingOrdinal) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d descendingOrdinal) Less(i, j int) bool { return getOrdinal(d[i]) > getOrdinal(d[j]) }

// getStatefulSetMaxUnavailable is rollingUpdate.maxUnavailable against replicas (a
// percentage rounds down), at least 1; unset means 1. Mirrors
// getStatefulSetMaxUnavailable.
func getStatefulSetMaxUnavailable(maxUnavailable *intstr.IntOrString, replicas int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, intstr.FromInt32(1)), replicas, false)
	if err != nil {
		return 0, err
	}
	return max(n, 1), nil
}

// retentionPolicy is the set's persistentVolumeClaimRetentionPolicy, Retain for what
// it leaves unset.
func retentionPolicy(set *appsv1.StatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
	}
	if r := set.Spec.PersistentVolumeClaimRetentionPolicy; r != nil {
		if r.WhenDeleted != "" {
			p.WhenDeleted = r.WhenDeleted
		}
		if r.WhenScaled != "" {
			p.WhenScaled = r.WhenScaled
		}
	}
	return p
}

// updateClaimOwnerRefs makes claim's owner references say what the set's retention
// policy wants for the claim of pod: owned by the set when WhenDeleted is Delete (the
// garbage collector deletes it with the set), owned by the pod when WhenScaled is Delete
// and the pod is being scaled away (inRange false: it goes with the pod); references to
// the set or pod it no longer wants are dropped, others kept. It reports whether it
// changed anything. Mirrors updateClaimOwnerRefForSetAndPod.
func updateClaimOwnerRefs(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod, inRange bool) bool {
	policy := retentionPolicy(set)
	var want []metav1.OwnerReference
	if policy.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		want = append(want, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set.Name, UID: set.UID})
	}
	if policy.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType && !inRange && pod.UID != "" {
		want = append(want, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID})
	}
	var refs []metav1.OwnerReference
	for _, ref := range claim.OwnerReferences {
		if ref.UID != set.UID && ref.UID != pod.UID {
			refs = append(refs, ref)
		}
	}
	refs = append(refs, want...)
	if apiequality.Semantic.DeepEqual(refs, claim.OwnerReferences) || (len(refs) == 0 && len(claim.OwnerReferences) == 0) {
		return false
	}
	claim.OwnerReferences = refs
	return true
}
