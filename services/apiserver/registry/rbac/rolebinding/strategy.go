// Package rolebinding is the rbac.authorization.k8s.io/v1 rolebindings resource: grants
// a Role's or ClusterRole's permissions to users, groups and service accounts within one
// namespace. Writes pass the escalation check (the requester holds the role's rules or
// may "bind" it). Mirrors k8s.io/kubernetes/pkg/registry/rbac/rolebinding.
package rolebinding

import (
	"context"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
	"skiff.dev/services/apiserver/registry/rbac/validation"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewDescriptor serves rolebindings; guard runs the escalation check on writes.
func NewDescriptor(guard *rbacregistry.Guard) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: rbacv1.SchemeGroupVersion,
		Resource:     "rolebindings",
		SingularName: "rolebinding",
		Kind:         "RoleBinding",
		NewFunc:      func() runtime.Object { return &rbacv1.RoleBinding{} },
		NewListFunc:  func() runtime.Object { return &rbacv1.RoleBindingList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &REST{Store: store, guard: guard}, nil, nil
		},
	}
}

// Strategy is the rolebindings strategy.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate fills the API groups v1 defaulting fills.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	b := obj.(*rbacv1.RoleBinding)
	validation.DefaultRoleRef(&b.RoleRef)
	validation.DefaultSubjects(b.Subjects)
}

// PrepareForUpdate fills the API groups v1 defaulting fills.
func (s Strategy) PrepareForUpdate(ctx context.Context, obj, _ runtime.Object) {
	s.PrepareForCreate(ctx, obj)
}

// Validate checks metadata, roleRef and subjects.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateRoleBinding(obj.(*rbacv1.RoleBinding))
}

// ValidateUpdate checks an update like a create; roleRef cannot change.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRoleBindingUpdate(obj.(*rbacv1.RoleBinding), old.(*rbacv1.RoleBinding))
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	b, ok := obj.(*rbacv1.RoleBinding)
	if !ok {
		return nil, nil, fmt.Errorf("not a role binding: %T", obj)
	}
	return labels.Set(b.Labels), registry.ObjectMetaFieldsSet(&b.ObjectMeta, true), nil
}

// TableColumns are NAME ROLE AGE, and with -o wide USERS GROUPS SERVICEACCOUNTS.
// Mirrors printRoleBinding.
func (Strategy) TableColumns() []metav1.TableColumnDefinition { return Columns("roleBinding") }

// TableRow prints one role binding.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	b := obj.(*rbacv1.RoleBinding)
	return Row(b.ObjectMeta, b.RoleRef, b.Subjects)
}

// Columns are a binding's columns; kind names it in the wide columns' descriptions
// ("roleBinding", "clusterRoleBinding").
func Columns(kind string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Role", Type: "string", Description: "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace."},
		registry.AgeColumn,
		{Name: "Users", Type: "string", Priority: 1, Description: "Users in the " + kind},
		{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the " + kind},
		{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the " + kind},
	}
}

// Row is a binding's cells: name, Kind/name of the role, age, and the users, groups and
// service accounts (namespace/name) it binds, each comma-separated.
func Row(m metav1.ObjectMeta, ref rbacv1.RoleRef, subjects []rbacv1.Subject) []interface{} {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			if s.Namespace != "" {
				sas = append(sas, s.Namespace+"/"+s.Name)
			} else {
				sas = append(sas, s.Name)
			}
		}
	}
	return []interface{}{m.Name, ref.Kind + "/" + ref.Name, registry.TranslateTimestampSince(m.CreationTimestamp),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}

// REST serves rolebindings: the generic Store, with the escalation check on create and
// update. Mirrors pkg/registry/rbac/rolebinding/policybased.
type REST struct {
	*registry.Store
	guard *rbacregistry.Guard
}

// Create stores the binding unless the requester may neither bind its role nor holds
// the role's rules (403), or the role does not exist (404).
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	b := obj.(*rbacv1.RoleBinding)
	ns := b.Namespace
	if ns == "" {
		ns = namespace
	}
	validation.DefaultRoleRef(&b.RoleRef)
	if err := r.guard.ConfirmBinding(ctx, r.Resource, ns, b.Name, b.RoleRef); err != nil {
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
		b, ok := obj.(*rbacv1.RoleBinding)
		if !ok {
			return obj, nil // the Store reports the wrong kind
		}
		validation.DefaultRoleRef(&b.RoleRef)
		if err := r.guard.ConfirmBinding(ctx, r.Resource, namespace, name, b.RoleRef); err != nil {
			return nil, err
		}
		return obj, nil
	})
	return r.Store.Update(ctx, namespace, name, guarded, opts)
}
