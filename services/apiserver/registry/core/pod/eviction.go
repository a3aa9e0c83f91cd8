package pod

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/client-go/util/retry"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/policy/poddisruptionbudget"
	"skiff.dev/services/apiserver/registry/rest"
)

// MaxDisruptedPodSize is the most entries status.disruptedPods of a PodDisruptionBudget
// may hold before evictions of its pods are refused (403): that many evictions the
// disruption controller has not yet seen through. Mirrors kube's MaxDisruptedPodSize.
const MaxDisruptedPodSize = 2000

// EvictionsRetry is how the eviction retries a PodDisruptionBudget write or a pod
// delete that lost a race with another writer (409): 20 tries, 500 ms apart. Mirrors
// kube's EvictionsRetry.
var EvictionsRetry = wait.Backoff{Steps: 20, Duration: 500 * time.Millisecond, Factor: 1.0, Jitter: 0.1}

// Messages and reasons of the Eviction API, kube's words.
const (
	// EvictionRefusedMessage is the message of the 429 an eviction gets when the pod's
	// PodDisruptionBudget allows no disruption now.
	EvictionRefusedMessage = "Cannot evict pod as it would violate the pod's disruption budget."
	// MultiplePDBsMessage is the message of the 500 an eviction of a pod that more
	// than one PodDisruptionBudget selects gets.
	MultiplePDBsMessage = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
	// EvictionByEvictionAPIReason is the reason of the DisruptionTarget condition an
	// eviction sets on the pod before it deletes it.
	EvictionByEvictionAPIReason = "EvictionByEvictionAPI"
)

// EvictionREST serves pods/eviction: POST a policy/v1 Eviction named after the pod and
// the pod is deleted (with the Eviction's deleteOptions) if its PodDisruptionBudget
// allows one more disruption now; each eviction granted takes one from the budget's
// status.disruptionsAllowed and records the pod in status.disruptedPods until the
// disruption controller sees it go. Pods that are terminal, pending or already being
// deleted are deleted without looking at budgets. Mirrors EvictionREST in
// k8s.io/kubernetes/pkg/registry/core/pod/storage/eviction.go.
type EvictionREST struct {
	store     *registry.Store // pods
	condition *registry.Store // pods, writing the DisruptionTarget condition
	pdbs      *registry.Store // poddisruptionbudgets; nil when they are not served
	pdbStatus *registry.Store // poddisruptionbudgets/status
}

// NewEvictionREST serves evictions of pods in store, judged by the budgets in pdbs (nil:
// no budget ever blocks an eviction).
func NewEvictionREST(store, pdbs *registry.Store) *EvictionREST {
	r := &EvictionREST{store: store, condition: store.WithStrategy(disruptionTargetStrategy{}), pdbs: pdbs}
	if pdbs != nil {
		r.pdbStatus = pdbs.WithStrategy(poddisruptionbudget.StatusStrategy{})
	}
	return r
}

var (
	_ rest.Creater                  = (*EvictionREST)(nil)
	_ rest.GroupVersionKindProvider = (*EvictionREST)(nil)
)

// New returns an empty Eviction for request decoding.
func (r *EvictionREST) New() runtime.Object { return &policyv1.Eviction{} }

// GroupVersionKind is policy/v1 Eviction though the subresource is served under core v1:
// discovery says so, and kubectl drain reads it there to choose the Eviction API.
func (r *EvictionREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return policyv1.SchemeGroupVersion.WithKind("Eviction")
}

// Create evicts the pod namespace/<obj's name> (the handler has checked the name against
// the URL). It returns a Success Status (201) once the pod is deleted or marked for
// deletion. Errors: 400 for another namespace in the Eviction or dry-run options that
// disagree; 404 for a missing pod; 409 when deleteOptions' preconditions fail; 429
// TooManyRequests "Cannot evict pod as it would violate the pod's disruption budget."
// with a DisruptionBudget cause "The disruption budget <name> needs <n> healthy pods and
// has <m> currently" when the budget allows no disruption, or "...is still being
// processed by the server." when the disruption controller has not seen the budget's
// latest spec; 403 when the budget's status is corrupt or holds more than
// MaxDisruptedPodSize pending evictions; a Failure Status with code 500 when more than
// one budget selects the pod.
func (r *EvictionREST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	eviction, ok := obj.(*policyv1.Eviction)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Eviction object: %T", obj))
	}
	if eviction.Namespace != "" && eviction.Namespace != namespace {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	name := eviction.Name
	if opts == nil {
		opts = &metav1.CreateOptions{}
	}
	originalDeleteOptions, err := propagateDryRun(eviction, opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}

	// A pod past disrupting (terminal, pending, already being deleted) is deleted without
	// looking at budgets. A delete that loses a race is retried, unless the caller
	// pinned a resourceVersion.
	var pod *corev1.Pod
	deleted := false
	shouldRetry := apierrors.IsConflict
	if !resourceVersionIsUnset(originalDeleteOptions) {
		shouldRetry = func(error) bool { return false }
	}
	err = retry.OnError(EvictionsRetry, shouldRetry, func() error {
		got, err := r.store.Get(ctx, namespace, name, &metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = got.(*corev1.Pod)
		if !canIgnorePDB(pod) {
			return nil
		}
		deleteOptions := originalDeleteOptions
		if shouldEnforceResourceVersion(pod) && resourceVersionIsUnset(originalDeleteOptions) {
			// The pod must still be the one read: not become ready meanwhile.
			deleteOptions = deleteOptions.DeepCopy()
			setPreconditionsResourceVersion(deleteOptions, pod.ResourceVersion)
		}
		if err := r.addConditionAndDeletePod(ctx, namespace, name, deleteOptions); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case deleted:
		return evicted(), nil
	}

	var pdbName string
	updateDeletionOptions := false
	var refusal *metav1.Status
	err = func() error {
		pdbs, err := r.podDisruptionBudgets(ctx, pod)
		if err != nil {
			return err
		}
		if len(pdbs) > 1 {
			refusal = &metav1.Status{Status: metav1.StatusFailure, Message: MultiplePDBsMessage, Code: 500}
			return nil
		}
		if len(pdbs) == 0 {
			return nil
		}
		pdb := &pdbs[0]
		pdbName = pdb.Name
		if !isPodReady(pod) {
			// An unready pod does not count among the healthy ones: deleting it takes
			// nothing from the budget when the policy always allows it, or when the
			// budget is met without it.
			if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
				updateDeletionOptions = true
				return nil
			}
			if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
				updateDeletionOptions = true
				return nil
			}
		}
		refresh := false
		return retry.RetryOnConflict(EvictionsRetry, func() error {
			if refresh {
				got, err := r.pdbs.Get(ctx, namespace, pdbName, &metav1.GetOptions{})
				if err != nil {
					return err
				}
				pdb = got.(*policyv1.PodDisruptionBudget)
			}
			if err := r.checkAndDecrement(ctx, pod.Name, pdb.DeepCopy(), dryrun.IsDryRun(originalDeleteOptions.DryRun)); err != nil {
				refresh = true
				return err
			}
			return nil
		})
	}()
	if wait.Interrupted(err) {
		err = apierrors.NewTimeoutError(fmt.Sprintf("couldn't update PodDisruptionBudget %q due to conflicts", pdbName), 10)
	}
	if err != nil {
		return nil, err
	}
	if refusal != nil {
		return refusal, nil
	}

	// No budget, or one that allowed this disruption, or an unready pod the budget can
	// spare: delete it.
	deleteOptions := originalDeleteOptions
	if updateDeletionOptions {
		// The pod must not have become ready since it was judged.
		deleteOptions = deleteOptions.DeepCopy()
		setPreconditionsResourceVersion(deleteOptions, pod.ResourceVersion)
	}
	if err := r.addConditionAndDeletePod(ctx, namespace, name, deleteOptions); err != nil {
		if apierrors.IsConflict(err) && updateDeletionOptions && resourceVersionIsUnset(originalDeleteOptions) {
			// The pod changed under us: the client should try again.
			return nil, tooManyRequests(pdbName)
		}
		return nil, err
	}
	return evicted(), nil
}

// evicted is the Status of a successful eviction.
func evicted() *metav1.Status {
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}
}

// addConditionAndDeletePod sets the pod's DisruptionTarget condition (True, reason
// EvictionByEvictionAPI) unless this is a dry run, then deletes the pod with options.
// The preconditions in options are checked against the pod the condition is written
// on (409 as the delete would give), and a resourceVersion precondition moves on to the
// version that write made. Mirrors addConditionAndDeletePod.
func (r *EvictionREST) addConditionAndDeletePod(ctx context.Context, namespace, name string, options *metav1.DeleteOptions) error {
	if !dryrun.IsDryRun(options.DryRun) {
		updated, _, err := r.condition.Update(ctx, namespace, name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
			pod := old.(*corev1.Pod).DeepCopy()
			if p := options.Preconditions; p != nil {
				if p.UID != nil && *p.UID != "" && *p.UID != pod.UID {
					return nil, apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, pod.Name,
						fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, pod.UID))
				}
				if p.ResourceVersion != nil && *p.ResourceVersion != "" && *p.ResourceVersion != pod.ResourceVersion {
					return nil, apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, pod.Name,
						fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, pod.ResourceVersion))
				}
			}
			setCondition(&pod.Status, corev1.PodCondition{
				Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
				Reason: EvictionByEvictionAPIReason, Message: "Eviction API: evicting",
			})
			return pod, nil
		}), &metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		if !resourceVersionIsUnset(options) {
			m, err := meta.Accessor(updated)
			if err != nil {
				return err
			}
			options = options.DeepCopy()
			setPreconditionsResourceVersion(options, m.GetResourceVersion())
		}
	}
	_, _, err := r.store.Delete(ctx, namespace, name, options)
	return err
}

// checkAndDecrement takes one disruption from pdb for podName, unless the budget allows
// none (429) or its status cannot be trusted (429 while the controller catches up with
// the spec, 403 when corrupt); outside a dry run it writes the budget's status back with
// the pod in disruptedPods (409 when pdb is stale). Mirrors checkAndDecrement.
func (r *EvictionREST) checkAndDecrement(ctx context.Context, podName string, pdb *policyv1.PodDisruptionBudget, dryRun bool) error {
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return tooManyRequests(pdb.Name)
	}
	if pdb.Status.DisruptionsAllowed < 0 {
		return apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, errors.New("pdb disruptions allowed is negative"))
	}
	if len(pdb.Status.DisruptedPods) > MaxDisruptedPodSize {
		return apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	}
	if pdb.Status.DisruptionsAllowed == 0 {
		err := apierrors.NewTooManyRequests(EvictionRefusedMessage, 0)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)})
		return err
	}
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptionsAllowed == 0 {
		pdbhelper.UpdateDisruptionAllowedCondition(pdb)
	}
	if dryRun {
		return nil
	}
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = map[string]metav1.Time{}
	}
	// The disruption controller counts the pod as gone from now on, and forgets it
	// if it is not being deleted within its DeletionTimeout.
	pdb.Status.DisruptedPods[podName] = metav1.Now()
	_, _, err := r.pdbStatus.Update(ctx, pdb.Namespace, pdb.Name, rest.DefaultUpdatedObjectInfo(pdb), &metav1.UpdateOptions{})
	return err
}

// podDisruptionBudgets returns the budgets in the pod's namespace whose selector
// matches the pod. A nil or empty selector matches nothing here, as in kube's eviction
// (the disruption controller lets an empty one select every pod).
func (r *EvictionREST) podDisruptionBudgets(ctx context.Context, pod *corev1.Pod) ([]policyv1.PodDisruptionBudget, error) {
	if r.pdbs == nil {
		return nil, nil
	}
	obj, err := r.pdbs.List(ctx, pod.Namespace, &metainternalversion.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []policyv1.PodDisruptionBudget
	for _, pdb := range obj.(*policyv1.PodDisruptionBudgetList).Items {
		selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || selector.Empty() || !selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, pdb)
	}
	return out, nil
}

// tooManyRequests is the 429 of an eviction that must be tried again later (10 s).
// Mirrors createTooManyRequestsError.
func tooManyRequests(pdbName string) error {
	err := apierrors.NewTooManyRequests(EvictionRefusedMessage, 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdbName)})
	return err
}

// propagateDryRun returns the delete options of the eviction with the request's dry-run
// option; an error when both name different ones. Mirrors propagateDryRun.
func propagateDryRun(eviction *policyv1.Eviction, options *metav1.CreateOptions) (*metav1.DeleteOptions, error) {
	if eviction.DeleteOptions == nil {
		return &metav1.DeleteOptions{DryRun: options.DryRun}, nil
	}
	if len(eviction.DeleteOptions.DryRun) == 0 {
		eviction.DeleteOptions.DryRun = options.DryRun
		return eviction.DeleteOptions, nil
	}
	if len(options.DryRun) == 0 {
		return eviction.DeleteOptions, nil
	}
	if !reflect.DeepEqual(options.DryRun, eviction.DeleteOptions.DryRun) {
		return nil, fmt.Errorf("Non-matching dry-run options in request and content: %v and %v", options.DryRun, eviction.DeleteOptions.DryRun)
	}
	return eviction.DeleteOptions, nil
}

// canIgnorePDB reports whether the pod may be deleted without asking its budget:
// terminal, still pending, or already being deleted. Mirrors canIgnorePDB.
func canIgnorePDB(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil
}

// shouldEnforceResourceVersion reports whether a delete that ignores budgets must still
// apply to the very pod read (a pending pod might become ready meanwhile). Mirrors
// shouldEnforceResourceVersion.
func shouldEnforceResourceVersion(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil
}

func resourceVersionIsUnset(options *metav1.DeleteOptions) bool {
	return options.Preconditions == nil || options.Preconditions.ResourceVersion == nil
}

func setPreconditionsResourceVersion(options *metav1.DeleteOptions, rv string) {
	if options.Preconditions == nil {
		options.Preconditions = &metav1.Preconditions{}
	}
	options.Preconditions.ResourceVersion = &rv
}

// isPodReady reports whether the pod's Ready condition is True. Mirrors IsPodReady.
func isPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// disruptionTargetStrategy lets an eviction write the pod's DisruptionTarget condition,
// which the main resource may not change.
type disruptionTargetStrategy struct{ Strategy }

// PrepareForUpdate keeps what the eviction computed from the stored pod.
func (disruptionTargetStrategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// ValidateUpdate checks only the metadata rules: nothing but the condition changed.
func (disruptionTargetStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	return apivalidation.ValidateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta, field.NewPath("metadata"))
}
