// Package clusterrole is the rbac.authorization.k8s.io/v1 clusterroles resource: a set
// of permissions bound cluster-wide or in namespaces. An aggregated ClusterRole (with an
// aggregationRule) gets its rules from the ClusterRoles its selectors match (the
// clusterrole-aggregation controller fills them). Writes pass the escalation check.
// Mirrors k8s.io/kubernetes/pkg/registry/rbac/clusterrole.
package clusterrole

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

// NewDescriptor serves clusterroles; guard runs the escalation check on writes.
func NewDescriptor(guard *rbacregistry.Guard) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: rbacv1.SchemeGroupVersion,
		Resource:     "clusterroles",
		SingularName: "clusterrole",
		Kind:         "ClusterRole",
		NewFunc:      func() runtime.Object { return &rbacv1.ClusterRole{} },
		NewListFunc:  func() runtime.Object { return &rbacv1.ClusterRoleList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &REST{Store: store, guard: guard}, nil, nil
		},
	}
}

// Strategy is the clusterroles strategy.
type Strategy struct{}

// NamespaceScoped is false.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate keeps the cluster role as sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the cluster role as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata, rules and the aggregationRule.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateClusterRole(obj.(*rbacv1.ClusterRole))
}

// ValidateUpdate checks an update like a create, plus the metadata update rules.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClusterRoleUpdate(obj.(*rbacv1.ClusterRole), old.(*rbacv1.ClusterRole))
}

// GetAttrs returns labels and metadata.name.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	r, ok := obj.(*rbacv1.ClusterRole)
	if !ok {
		return nil, nil, fmt.Errorf("not a cluster role: %T", obj)
	}
	return labels.Set(r.Labels), registry.ObjectMetaFieldsSet(&r.ObjectMeta, false), nil
}

// TableColumns are NAME CREATED AT. Mirrors printClusterRole.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{registry.NameColumn,
		{Name: "Created At", Type: "date", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}}
}

// TableRow prints one cluster role.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	r := obj.(*rbacv1.ClusterRole)
	return []interface{}{r.Name, r.CreationTimestamp.UTC().Format(time.RFC3339)}
}

// REST serves clusterroles: the generic Store, with the escalation check on create and
// update. Mirrors pkg/registry/rbac/clusterrole/policybased.
type REST struct {
	*registry.Store
	guard *rbacregistry.Guard
}

// Create stores role unless the requester may not grant its rules, or sets an
// aggregationRule without cluster-admin's rules (403).
func (r *REST) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	role := obj.(*rbacv1.ClusterRole)
	if err := r.guard.ConfirmRole(ctx, r.Resource, "", role.Name, role.Rules, role.AggregationRule != nil); err != nil {
		return nil, err
	}
	return r.Store.Create(ctx, namespace, obj, opts)
}

// Update replaces role under the same check; an aggregated role (before or after) needs
// cluster-admin's rules. Updates that only change ownerReferences or finalizers pass.
func (r *REST) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	guarded := rest.UpdatedObjectFunc(func(ctx context.Context, old runtime.Object) (runtime.Object, error) {
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil || rbacregistry.IsOnlyMutatingGCFields(obj, old) {
			return obj, err
		}
		role, ok := obj.(*rbacv1.ClusterRole)
		oldRole, _ := old.(*rbacv1.ClusterRole)
		if !ok || oldRole == nil {
			return obj, nil // the Store reports the wrong kind
		}
		// Setting, changing or keeping an aggregationRule needs cluster-admin's rules: it
		// can gather anything and keep the role from being tightened.
		aggregation := role.AggregationRule != nil || oldRole.AggregationRule != nil
		if err := r.guard.ConfirmRole(ctx, r.Resource, "", name, role.Rules, aggregation); err != nil {
			return nil, err
		}
		return obj, nil
	})
	return r.Store.Update(ctx, namespace, name, guarded, opts)
}
