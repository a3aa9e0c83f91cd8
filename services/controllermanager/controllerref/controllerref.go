// Package controllerref decides which objects a controller owns: those whose controller
// ownerReference points at it, plus orphans its selector matches (adopted by adding the
// reference); owned objects that no longer match are released (the reference removed).
// Mirrors BaseControllerRefManager.ClaimObject in
// k8s.io/kubernetes/pkg/controller/controller_ref_manager.go.
package controllerref

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// NewControllerRef is the ownerReference a controller puts on what it creates or
// adopts: controller=true and blockOwnerDeletion=true, so a foreground delete of the
// owner waits for it. Mirrors metav1.NewControllerRef.
func NewControllerRef(owner metav1.Object, gvk schema.GroupVersionKind) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &yes,
	}
}

// Patcher applies a strategic merge patch to one dependent (namespace/name).
type Patcher func(ctx context.Context, namespace, name string, patch []byte) error

// Manager claims objects for one controller.
type Manager struct {
	// Controller is the owning object (a ReplicaSet, Deployment or Job).
	Controller metav1.Object
	// Kind is the controller's group version kind, for the references it writes.
	Kind schema.GroupVersionKind
	// Selector picks the objects the controller should own.
	Selector labels.Selector
	// Filter, when set, must also accept an object for the controller to own it: an
	// owned object it rejects is released, an orphan it rejects is left alone (kube's
	// ClaimObject filters, e.g. a StatefulSet owns only pods named <set>-<ordinal>).
	Filter func(obj metav1.Object) bool
	// CanAdopt reads the controller fresh and fails if it is being deleted or was
	// replaced (another uid), so a stale cache never adopts for a dead owner. Called
	// at most once per Claim, before the first adoption.
	CanAdopt func(ctx context.Context) error
	// Patch adds or removes the reference on a dependent.
	Patch Patcher
	// Finalizers are added to a dependent with the reference when it is adopted, and
	// removed with it when it is released (the Job controller's
	// batch.kubernetes.io/job-tracking). Mirrors NewPodControllerRefManager's
	// finalizers.
	Finalizers []string

	once     sync.Once
	adoptErr error
}

// Claim returns the objects the controller owns after adopting matching orphans and
// releasing owned objects that no longer match. Objects owned by another controller
// and objects being deleted are never touched. A dependent that vanished meanwhile is
// skipped; other patch errors are returned with the objects claimed so far.
func Claim[T metav1.Object](ctx context.Context, m *Manager, objs []T) ([]T, error) {
	var claimed []T
	var errs []error
	for _, obj := range objs {
		ok, err := m.claimOne(ctx, obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			claimed = append(claimed, obj)
		}
	}
	if len(errs) > 0 {
		return claimed, fmt.Errorf("claiming %d objects: %v", len(errs), errs)
	}
	return claimed, nil
}

func (m *Manager) claimOne(ctx context.Context, obj metav1.Object) (bool, error) {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		if ref.UID != m.Controller.GetUID() {
			return false, nil // another controller's
		}
		if m.matches(obj) {
			return true, nil
		}
		if m.Controller.GetDeletionTimestamp() != nil || obj.GetDeletionTimestamp() != nil {
			return false, nil
		}
		if err := m.release(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return false, nil
	}
	if m.Controller.GetDeletionTimestamp() != nil || !m.matches(obj) ||
		obj.GetDeletionTimestamp() != nil || obj.GetNamespace() != m.Controller.GetNamespace() {
		return false, nil
	}
	m.once.Do(func() { m.adoptErr = m.CanAdopt(ctx) })
	if m.adoptErr != nil {
		return false, nil
	}
	if err := m.adopt(ctx, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// matches reports whether the controller should own obj: Selector and Filter accept it.
func (m *Manager) matches(obj metav1.Object) bool {
	return m.Selector.Matches(labels.Set(obj.GetLabels())) && (m.Filter == nil || m.Filter(obj))
}

// adopt adds the controller reference (and the manager's finalizers); the dependent's
// uid in the patch makes it a precondition (409 if the name now holds another object).
func (m *Manager) adopt(ctx context.Context, obj metav1.Object) error {
	meta := map[string]any{
		"ownerReferences": []*metav1.OwnerReference{NewControllerRef(m.Controller, m.Kind)},
		"uid":             obj.GetUID(),
	}
	if len(m.Finalizers) > 0 {
		meta["finalizers"] = m.Finalizers
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	return m.Patch(ctx, obj.GetNamespace(), obj.GetName(), patch)
}

// release removes the controller reference with a strategic-merge $patch: delete, and
// the manager's finalizers with $deleteFromPrimitiveList.
func (m *Manager) release(ctx context.Context, obj metav1.Object) error {
	patch := ReleasePatch(m.Controller.GetUID(), obj.GetUID())
	if len(m.Finalizers) > 0 {
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{
			"ownerReferences":                     []map[string]any{{"$patch": "delete", "uid": m.Controller.GetUID()}},
			"uid":                                 obj.GetUID(),
			"$deleteFromPrimitiveList/finalizers": m.Finalizers,
		}})
	}
	return m.Patch(ctx, obj.GetNamespace(), obj.GetName(), patch)
}

// ReleasePatch is the strategic merge patch that removes the ownerReference to owner
// from the dependent with uid dependent. The garbage collector orphans with it too.
func ReleasePatch(owner, dependent types.UID) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": owner}},
		"uid":             dependent,
	}})
	return patch
}

// RecheckDeletionTimestamp returns a CanAdopt that reads the controller through get and
// fails when it is gone, replaced or being deleted. Mirrors RecheckDeletionTimestamp.
func RecheckDeletionTimestamp(uid types.UID, get func(ctx context.Context) (metav1.Object, error)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		fresh, err := get(ctx)
		if err != nil {
			return err
		}
		if fresh.GetUID() != uid {
			return fmt.Errorf("original controller %v is gone: got uid %v", uid, fresh.GetUID())
		}
		if fresh.GetDeletionTimestamp() != nil {
			return fmt.Errorf("%s/%s has just been deleted at %v", fresh.GetNamespace(), fresh.GetName(), fresh.GetDeletionTimestamp())
		}
		return nil
	}
}
