// Package podcontrol is how workload controllers create and delete the pods they own:
// pods made from a template with a controller reference, events for each create and
// delete, creation in slow-start batches, the order in which surplus pods are deleted,
// and the readiness and availability tests the controllers count with. Mirrors
// RealPodControl, slowStartBatch, ActivePodsWithRanks and pkg/api/v1/pod's IsPodReady
// and IsPodAvailable.
package podcontrol

import (
	"context"
	"fmt"
	"k8s.io/client-go/tools/cache"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// Event reasons, as kube's controllers report them.
const (
	SuccessfulCreateReason = "SuccessfulCreate"
	FailedCreateReason     = "FailedCreate"
	SuccessfulDeleteReason = "SuccessfulDelete"
	FailedDeleteReason     = "FailedDelete"
)

// PodControl creates and deletes pods on behalf of a controller object.
type PodControl struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
}

// PodFromTemplate returns the pod a controller creates from template: the template's
// labels, annotations, finalizers and spec, generateName "<owner>-", and ref as its only
// owner reference. Mirrors GetPodFromTemplate.
func PodFromTemplate(template *corev1.PodTemplateSpec, ownerName string, ref *metav1.OwnerReference) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Labels:       copyMap(template.Labels),
			Annotations:  copyMap(template.Annotations),
			Finalizers:   append([]string(nil), template.Finalizers...),
			GenerateName: ownerName + "-",
		},
		Spec: *template.Spec.DeepCopy(),
	}
	if ref != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return pod
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// CreatePod creates pod in namespace and records SuccessfulCreate or FailedCreate on
// owner.
func (c PodControl) CreatePod(ctx context.Context, namespace string, pod *corev1.Pod, owner runtime.Object) (*corev1.Pod, error) {
	created, err := c.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		c.Recorder.Eventf(owner, corev1.EventTypeWarning, FailedCreateReason, "Error creating: %v", err)
		return nil, err
	}
	c.Recorder.Eventf(owner, corev1.EventTypeNormal, SuccessfulCreateReason, "Created pod: %v", created.Name)
	return created, nil
}

// DeletePod deletes the pod (its uid as precondition, so a namesake is never hit) and
// records SuccessfulDelete or FailedDelete on owner.
func (c PodControl) DeletePod(ctx context.Context, pod *corev1.Pod, owner runtime.Object) error {
	uid := pod.UID
	err := c.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		c.Recorder.Eventf(owner, corev1.EventTypeWarning, FailedDeleteReason, "Error deleting: %v", err)
		return err
	}
	c.Recorder.Eventf(owner, corev1.EventTypeNormal, SuccessfulDeleteReason, "Deleted pod: %v", pod.Name)
	return nil
}

// SlowStartInitialBatchSize is the first batch of SlowStartBatch. Mirrors
// controller.SlowStartInitialBatchSize.
const SlowStartInitialBatchSize = 1

// SlowStartBatch calls fn count times in batches of 1, 2, 4, ... run in parallel, and
// stops after the first batch with an error, so a create that is going to fail (quota,
// a bad template) fails once, not count times. It returns how many calls succeeded and
// the first error. Mirrors slowStartBatch.
func SlowStartBatch(count, initialBatchSize int, fn func() error) (int, error) {
	remaining := count
	successes := 0
	for batchSize := min(remaining, initialBatchSize); batchSize > 0; batchSize = min(2*batchSize, remaining) {
		errCh := make(chan error, batchSize)
		var wg sync.WaitGroup
		wg.Add(batchSize)
		for i := 0; i < batchSize; i++ {
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errCh <- err
				}
			}()
		}
		wg.Wait()
		curSuccesses := batchSize - len(errCh)
		successes += curSuccesses
		if len(errCh) > 0 {
			return successes, <-errCh
		}
		remaining -= batchSize
	}
	return successes, nil
}

// IsActive reports whether a pod counts towards its controller's replicas: not
// terminal and not being deleted. Mirrors FilterActivePods' test.
func IsActive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

// readyCondition returns the pod's Ready condition, or nil.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// IsReady reports whether the pod's Ready condition is True. Mirrors IsPodReady.
func IsReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsAvailable reports whether the pod has been ready for at least minReadySeconds at
// now. Mirrors IsPodAvailable.
func IsAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	c := readyCondition(p)
	if c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	return !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(time.Duration(minReadySeconds)*time.Second).Before(now)
}

// RankedForDeletion orders pods so the ones to delete first come first: unscheduled
// before scheduled, Pending before Unknown before Running, not ready before ready, pods
// on nodes crowded with related pods (higher rank) first, ready for a shorter time
// first, more container restarts first, newer first. Ranks[i] belongs to Pods[i].
// Mirrors ActivePodsWithRanks (without the logarithmic age buckets).
type RankedForDeletion struct {
	Pods  []*corev1.Pod
	Ranks []int
	Now   time.Time
}

// Len is the number of pods.
func (s RankedForDeletion) Len() int { return len(s.Pods) }

// Swap swaps pods i and j with their ranks.
func (s RankedForDeletion) Swap(i, j int) {
	s.Pods[i], s.Pods[j] = s.Pods[j], s.Pods[i]
	s.Ranks[i], s.Ranks[j] = s.Ranks[j], s.Ranks[i]
}

var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// Less reports whether pod i should be deleted before pod j.
func (s RankedForDeletion) Less(i, j int) bool {
	a, b := s.Pods[i], s.Pods[j]
	if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if phaseOrder[a.Status.Phase] != phaseOrder[b.Status.Phase] {
		return phaseOrder[a.Status.Phase] < phaseOrder[b.Status.Phase]
	}
	if IsReady(a) != IsReady(b) {
		return !IsReady(a)
	}
	if s.Ranks[i] != s.Ranks[j] {
		return s.Ranks[i] > s.Ranks[j]
	}
	if IsReady(a) && IsReady(b) {
		ra, rb := readyCondition(a).LastTransitionTime, readyCondition(b).LastTransitionTime
		if !ra.Equal(&rb) {
			return afterOrZero(&ra, &rb)
		}
	}
	if ra, rb := maxRestarts(a), maxRestarts(b); ra != rb {
		return ra > rb
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return afterOrZero(&a.CreationTimestamp, &b.CreationTimestamp)
	}
	return a.Name > b.Name
}

// afterOrZero is true if t1 is after t2, or t1 is unset and t2 set.
func afterOrZero(t1, t2 *metav1.Time) bool {
	if t1.Time.IsZero() || t2.Time.IsZero() {
		return t1.Time.IsZero()
	}
	return t1.After(t2.Time)
}

func maxRestarts(p *corev1.Pod) int32 {
	var m int32
	for _, c := range p.Status.ContainerStatuses {
		m = max(m, c.RestartCount)
	}
	return m
}

// RanksBySameNode ranks each pod by how many of related (active pods of the same
// workload, itself included) run on its node. Mirrors
// getPodsRankedByRelatedPodsOnSameNode.
func RanksBySameNode(pods, related []*corev1.Pod) []int {
	perNode := map[string]int{}
	for _, p := range related {
		if IsActive(p) {
			perNode[p.Spec.NodeName]++
		}
	}
	ranks := make([]int, len(pods))
	for i, p := range pods {
		ranks[i] = perNode[p.Spec.NodeName]
	}
	return ranks
}

// Key is a pod's "namespace/name", the key expectations track deletions by.
func Key(p *corev1.Pod) string { return fmt.Sprintf("%s/%s", p.Namespace, p.Name) }

// DeletedPod is the pod an informer's delete handler was given: the pod itself, or the
// one in the tombstone a relist leaves for a deletion it missed; nil for anything else.
func DeletedPod(obj interface{}) *corev1.Pod {
	switch t := obj.(type) {
	case *corev1.Pod:
		return t
	case cache.DeletedFinalStateUnknown:
		pod, _ := t.Obj.(*corev1.Pod)
		return pod
	}
	return nil
}
