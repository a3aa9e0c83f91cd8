// Package clusterrolebinding is the rbac.authorization.k8s.io/v1 clusterrolebindings
// resource: grants a ClusterRole's permissions cluster-wide. Writes pass the escalation
// check. Mirrors k8s.io/kubernetes/pkg/registry/rbac/clusterrolebinding.
package clusterrolebinding

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
	"skiff.dev/services/apiserver/registry/rbac/rolebinding"
	"skiff.dev/services/apiserver/registry/rbac/validation"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewDescriptor serves clusterrolebindings; guard runs the escalation check on writes.
func NewDescriptor(guard *rbacregistry.Guard) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: rbacv1.SchemeGroupVersion,
		Resource:     "clusterrolebindings",
		SingularName: "clusterrolebinding",
		Kind:         "ClusterRoleBinding",
		NewFunc:      func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
		NewListFunc:  func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &REST{Store: store, guard: guard}, nil, nil
		},
	}
}

// Strategy is the clusterrolebindings strategy.
type Strategy struct{}

// NamespaceScoped is false.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate fills the API groups v1 defaulting fills.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	b := obj.(*rbacv1.ClusterRoleBinding)
	validation.DefaultRoleRef(&b.RoleRef)
	validation.DefaultSubjects(b.Subjects)
}

// PrepareForUpdate fills the API groups v1 defaulting fills.
func (s Strategy) PrepareForUpdate(ctx context.Context, obj, _ runtime.Object) {
	s.PrepareForCreate(ctx, obj)
}

// Validate checks metadata, roleRef (a ClusterRole) and subjects.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateClusterRoleBinding(obj.(*rbacv1.ClusterRoleBinding))
}

// ValidateUpdate checks an update like a create; roleRef cannot change.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClusterRoleBindingUpdate(obj.(*rbacv1.ClusterRoleBinding), old.(*rbacv1.ClusterRoleBinding))
}

// GetAttrs returns labels and metadata.name.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	b, ok := obj.(*rbacv1.ClusterRoleBinding)
	if !ok {
		return nil, nil, fmt.Errorf("not a cluster role binding: %T", obj)
	}
	return labels.Set(b.Labels), registry.ObjectMetaFieldsSet(&b.ObjectMeta, false), nil
}

// TableColumns are NAME ROLE AGE, and with -o wide USERS GROUPS SERVICEACCOUNTS.
// Mirrors printClusterRoleBinding.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return rolebinding.Columns("clusterRoleBinding")
}

// TableRow prints one cluster role binding.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	b := obj.(*rbacv1.ClusterRoleBinding)
	return rolebinding.Row(b.ObjectMeta, b.RoleRef, b.Subjects)
}

// REST serves clusterrolebindings: the generic Store, with the escalation check on create
// and update. Mirrors pkg/registry/rbac/clusterrolebinding/policybased.
type REST struct {
	*registry.Store
	guard *rbacregistry.Guard
}

// Create stores the binding unless the requester may neither bind its ClusterRole nor
// holds its rules (403), or the role does not exist (404).
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	b := obj.(*rbacv1.ClusterRoleBinding)
	validation.DefaultRoleRef(&b.RoleRef)
	if err := r.guard.ConfirmBinding(ctx, r.Resource, "", b.Name, b.RoleRef); err != nil {
		return nil, err
	}
	return r.Store.Create(ctx, namespace, obj, opts)
}

// Update replaces the binding under the same check; updates that only change
// ownerReferences or finalizers pass.
func (r *REST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	guarded := rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil || rbacregistry.IsOnlyMutatingGCFields(obj, old) {
			return obj, err
		}
		b, ok := obj.(*rbacv1.ClusterRoleBinding)
		if !ok {
			return obj, nil // the Store reports the wrong kind
		}
		validation.DefaultRoleRef(&b.RoleRef)
		if err := r.guard.ConfirmBinding(ctx, r.Resource, "", name, b.RoleRef); err != nil {
			return nil, err
		}
		return obj, nil
	})
	return r.Store.Update(ctx, namespace, name, guarded, opts)
}
