// Package role is the rbac.authorization.k8s.io/v1 roles resource: a namespace's set of
// permissions. Writes pass the escalation check (a user grants only what it holds).
// Mirrors k8s.io/kubernetes/pkg/registry/rbac/role.
package role

import (
	"context"
	"fmt"
	"time"

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

// NewDescriptor serves roles; guard runs the escalation check on writes.
func NewDescriptor(guard *rbacregistry.Guard) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: rbacv1.SchemeGroupVersion,
		Resource:     "roles",
		SingularName: "role",
		Kind:         "Role",
		NewFunc:      func() runtime.Object { return &rbacv1.Role{} },
		NewListFunc:  func() runtime.Object { return &rbacv1.RoleList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &REST{Store: store, guard: guard}, nil, nil
		},
	}
}

// Strategy is the roles strategy.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the role as sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the role as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata and rules (validation.ValidateRole).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateRole(obj.(*rbacv1.Role))
}

// ValidateUpdate checks an update like a create, plus the metadata update rules.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRoleUpdate(obj.(*rbacv1.Role), old.(*rbacv1.Role))
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	r, ok := obj.(*rbacv1.Role)
	if !ok {
		return nil, nil, fmt.Errorf("not a role: %T", obj)
	}
	return labels.Set(r.Labels), registry.ObjectMetaFieldsSet(&r.ObjectMeta, true), nil
}

// TableColumns are NAME CREATED AT. Mirrors printRole.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{registry.NameColumn, CreatedAtColumn}
}

// TableRow prints one role.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	r := obj.(*rbacv1.Role)
	return []interface{}{r.Name, r.CreationTimestamp.UTC().Format(time.RFC3339)}
}

// CreatedAtColumn is the CREATED AT column of roles and cluster roles.
var CreatedAtColumn = metav1.TableColumnDefinition{Name: "Created At", Type: "date",
	Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}

// REST serves roles: the generic Store, with the escalation check on create and update.
// Mirrors pkg/registry/rbac/role/policybased.
type REST struct {
	*registry.Store
	guard *rbacregistry.Guard
}

// Create stores role unless the requester may not grant its rules (403).
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	role := obj.(*rbacv1.Role)
	ns := role.Namespace
	if ns == "" {
		ns = namespace
	}
	if err := r.guard.ConfirmRole(ctx, r.Resource, ns, role.Name, role.Rules, false); err != nil {
		return nil, err
	}
	return r.Store.Create(ctx, namespace, obj, opts)
}

// Update replaces role unless the new rules are more than the requester may grant (403);
// updates that only change ownerReferences or finalizers pass.
func (r *REST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	guarded := rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil || rbacregistry.IsOnlyMutatingGCFields(obj, old) {
			return obj, err
		}
		role, ok := obj.(*rbacv1.Role)
		if !ok {
			return obj, nil // the Store reports the wrong kind
		}
		if err := r.guard.ConfirmRole(ctx, r.Resource, namespace, name, role.Rules, false); err != nil {
			return nil, err
		}
		return obj, nil
	})
	return r.Store.Update(ctx, namespace, name, guarded, opts)
}
