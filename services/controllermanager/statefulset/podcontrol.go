package statefulset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
)

// errClaimsNotServed is why no claim is created when the apiserver does not serve
// persistentvolumeclaims.
var errClaimsNotServed = errors.New("the server does not serve persistentvolumeclaims")

// StatefulPodControl creates, updates and deletes a StatefulSet's pods and creates their
// PersistentVolumeClaims, recording kube's events on the set for each: SuccessfulCreate
// "create Pod web-0 in StatefulSet web successful", SuccessfulDelete "delete Pod web-2 in
// StatefulSet web successful", SuccessfulUpdate, their Failed* counterparts "... failed
// error: <err>", and for claims "create Claim www-web-0 Pod web-0 in StatefulSet web
// success". Mirrors StatefulPodControl (stateful_pod_control.go).
type StatefulPodControl struct {
	client    kubernetes.Interface
	podLister corelisters.PodLister
	recorder  record.EventRecorder

	mu           sync.Mutex
	claimsServed bool // once seen served, never asked again
}

// NewStatefulPodControl returns the control writing through client, rereading pods
// through podLister on update conflicts and recording on recorder.
func NewStatefulPodControl(client kubernetes.Interface, podLister corelisters.PodLister, recorder record.EventRecorder) *StatefulPodControl {
	return &StatefulPodControl{client: client, podLister: podLister, recorder: recorder}
}

// CreateStatefulPod creates pod's claims, then pod. An AlreadyExists error from the pod
// create is returned without an event (the informer has not caught up). Claims that
// cannot be created because the apiserver serves no persistentvolumeclaims do not stop
// the pod (see createPersistentVolumeClaims). Mirrors CreateStatefulPod.
func (spc *StatefulPodControl) CreateStatefulPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := spc.createPersistentVolumeClaims(ctx, set, pod); err != nil {
		spc.recordPodEvent("create", set, pod, err)
		return err
	}
	_, err := spc.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return err
	}
	spc.recordPodEvent("create", set, pod, err)
	return err
}

// UpdateStatefulPod restores pod's identity and storage for set when they drifted,
// retrying conflicts with the cached pod; an event is recorded when an update was
// attempted. Mirrors UpdateStatefulPod.
func (spc *StatefulPodControl) UpdateStatefulPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	attempted := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		consistent := true
		if !identityMatches(set, pod) {
			updateIdentity(set, pod)
			consistent = false
		}
		if !storageMatches(set, pod) {
			updateStorage(set, pod)
			consistent = false
			if err := spc.createPersistentVolumeClaims(ctx, set, pod); err != nil {
				spc.recordPodEvent("update", set, pod, err)
				return err
			}
		}
		if consistent {
			return nil
		}
		attempted = true
		_, updateErr := spc.client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
		if updateErr == nil {
			return nil
		}
		if cached, err := spc.podLister.Pods(set.Namespace).Get(pod.Name); err == nil {
			pod = cached.DeepCopy()
		}
		return updateErr
	})
	if attempted {
		spc.recordPodEvent("update", set, pod, err)
	}
	return err
}

// DeleteStatefulPod deletes pod and records SuccessfulDelete or FailedDelete. Mirrors
// DeleteStatefulPod.
func (spc *StatefulPodControl) DeleteStatefulPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	err := spc.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	spc.recordPodEvent("delete", set, pod, err)
	return err
}

// UpdatePodClaimForRetentionPolicy gives the claims of a pod being scaled away the owner
// references the set's retention policy wants (with WhenScaled Delete, the pod: the
// garbage collector deletes them once the pod is gone), before the pod is deleted. A
// claim that does not exist is skipped. Mirrors UpdatePodClaimForRetentionPolicy.
func (spc *StatefulPodControl) UpdatePodClaimForRetentionPolicy(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	claims := getPersistentVolumeClaims(set, pod)
	for i := range set.Spec.VolumeClaimTemplates {
		name := claims[set.Spec.VolumeClaimTemplates[i].Name].Name
		claim, err := spc.client.CoreV1().PersistentVolumeClaims(set.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("could not retrieve claim %s for %s when checking PVC deletion policy: %w", name, pod.Name, err)
		}
		claim = claim.DeepCopy()
		if !updateClaimOwnerRefs(claim, set, pod, false) {
			continue
		}
		if _, err := spc.client.CoreV1().PersistentVolumeClaims(set.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("could not update claim %s for delete policy ownerRefs: %w", name, err)
		}
	}
	return nil
}

// createPersistentVolumeClaims creates each of pod's claims that does not exist yet, owned
// as the set's retention policy wants (updateClaimOwnerRefs), (recording a create event
// per claim) and fails when one cannot be read or created, or
// is being deleted. When the apiserver does not serve persistentvolumeclaims at all,
// nothing is created, a FailedCreate warning is recorded per claim, and nil is
// returned: the pod is created without its claims (its volumes then name claims that
// do not exist). Mirrors createPersistentVolumeClaims; the served check is skiff's.
func (spc *StatefulPodControl) createPersistentVolumeClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	claims := getPersistentVolumeClaims(set, pod)
	served, err := spc.persistentVolumeClaimsServed(ctx)
	if err != nil {
		return err
	}
	if !served {
		for i := range set.Spec.VolumeClaimTemplates {
			claim := claims[set.Spec.VolumeClaimTemplates[i].Name]
			spc.recordClaimEvent("create", set, pod, &claim, errClaimsNotServed)
		}
		return nil
	}
	var errs []error
	for i := range set.Spec.VolumeClaimTemplates {
		claim := claims[set.Spec.VolumeClaimTemplates[i].Name]
		existing, err := spc.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			updateClaimOwnerRefs(&claim, set, pod, true)
			_, err := spc.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Create(ctx, &claim, metav1.CreateOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to create PVC %s: %s", claim.Name, err))
			}
			if err == nil || !apierrors.IsAlreadyExists(err) {
				spc.recordClaimEvent("create", set, pod, &claim, err)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("failed to retrieve PVC %s: %s", claim.Name, err))
			spc.recordClaimEvent("create", set, pod, &claim, err)
		case existing.DeletionTimestamp != nil:
			errs = append(errs, fmt.Errorf("pvc %s is being deleted", claim.Name))
		}
	}
	return errors.Join(errs...)
}

// persistentVolumeClaimsServed asks discovery whether core/v1 serves
// persistentvolumeclaims; a yes is remembered.
func (spc *StatefulPodControl) persistentVolumeClaimsServed(ctx context.Context) (bool, error) {
	spc.mu.Lock()
	defer spc.mu.Unlock()
	if spc.claimsServed {
		return true, nil
	}
	list, err := spc.client.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		return false, fmt.Errorf("discovering core/v1 resources: %w", err)
	}
	for _, r := range list.APIResources {
		if r.Name == "persistentvolumeclaims" {
			spc.claimsServed = true
			return true, nil
		}
	}
	return false, nil
}

// recordPodEvent records kube's event for verb ("create", "update", "delete") on pod.
func (spc *StatefulPodControl) recordPodEvent(verb string, set *appsv1.StatefulSet, pod *corev1.Pod, err error) {
	if err == nil {
		spc.recorder.Event(set, corev1.EventTypeNormal, "Successful"+title(verb),
			fmt.Sprintf("%s Pod %s in StatefulSet %s successful", verb, pod.Name, set.Name))
		return
	}
	spc.recorder.Event(set, corev1.EventTypeWarning, "Failed"+title(verb),
		fmt.Sprintf("%s Pod %s in StatefulSet %s failed error: %s", verb, pod.Name, set.Name, err))
}

// recordClaimEvent records kube's event for verb on one of pod's claims.
func (spc *StatefulPodControl) recordClaimEvent(verb string, set *appsv1.StatefulSet, pod *corev1.Pod, claim *corev1.PersistentVolumeClaim, err error) {
	if err == nil {
		spc.recorder.Event(set, corev1.EventTypeNormal, "Successful"+title(verb),
			fmt.Sprintf("%s Claim %s Pod %s in StatefulSet %s success", verb, claim.Name, pod.Name, set.Name))
		return
	}
	spc.recorder.Event(set, corev1.EventTypeWarning, "Failed"+title(verb),
		fmt.Sprintf("%s Claim %s for Pod %s in StatefulSet %s failed error: %s", verb, claim.Name, pod.Name, set.Name, err))
}

// title upper-cases the first letter of an ASCII verb.
func title(verb string) string { return strings.ToUpper(verb[:1]) + verb[1:] }
