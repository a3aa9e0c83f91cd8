package bootstrappolicy

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Reconcile makes the stored policy hold ClusterRoles, ClusterRoleBindings and Roles: what is
// missing is created, missing rules and subjects are added to existing objects, and what
// users added is kept; an object annotated rbac.authorization.kubernetes.io/autoupdate:
// "false" is left alone. It writes through the Stores directly (the apiserver's own
// loopback, as kube's post-start hook writes as system:masters) and returns every object
// as stored, for Policy.WaitFor. Mirrors kube's rbac/bootstrap-roles post-start hook
// (pkg/registry/rbac/rest), built on k8s.io/component-helpers' reconciliation.
func Reconcile(ctx context.Context, stores registry.Stores) ([]runtime.Object, error) {
	roles := stores.Store(rbacv1.Resource("clusterroles"))
	bindings := stores.Store(rbacv1.Resource("clusterrolebindings"))
	namespaced := stores.Store(rbacv1.Resource("roles"))
	if roles == nil || bindings == nil || namespaced == nil {
		return nil, fmt.Errorf("bootstrap policy: clusterroles, clusterrolebindings and roles must be served")
	}
	clusterRoles, clusterRoleBindings, namespaceRoles := ClusterRoles(), ClusterRoleBindings(), Roles()
	// Each object is its own read and write; they are independent, so they go to etcd
	// together (etcd commits concurrent writes under one WAL sync), not one after another:
	// on a fresh cluster this is over a hundred writes before the apiserver is ready.
	out := make([]runtime.Object, len(clusterRoles)+len(clusterRoleBindings)+len(namespaceRoles))
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(reconcileWorkers)
	for i, role := range clusterRoles {
		g.Go(func() error {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				result, err := (&reconciliation.ReconcileRoleOptions{
					Role:    reconciliation.ClusterRoleRuleOwner{ClusterRole: role.DeepCopy()},
					Client:  clusterRoleModifier{ctx: ctx, store: roles},
					Confirm: true,
				}).Run()
				if err == nil {
					out[i] = result.Role.GetObject()
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("bootstrap policy: clusterrole %s: %w", role.Name, err)
			}
			return nil
		})
	}
	for i, b := range clusterRoleBindings {
		g.Go(func() error {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				result, err := (&reconciliation.ReconcileRoleBindingOptions{
					RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b.DeepCopy()},
					Client:      clusterRoleBindingModifier{ctx: ctx, store: bindings},
					Confirm:     true,
				}).Run()
				if err == nil {
					out[len(clusterRoles)+i] = result.RoleBinding.GetObject()
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("bootstrap policy: clusterrolebinding %s: %w", b.Name, err)
			}
			return nil
		})
	}
	for i, role := range namespaceRoles {
		g.Go(func() error {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				result, err := (&reconciliation.ReconcileRoleOptions{
					Role:    reconciliation.RoleRuleOwner{Role: role.DeepCopy()},
					Client:  roleModifier{ctx: ctx, store: namespaced},
					Confirm: true,
				}).Run()
				if err == nil {
					out[len(clusterRoles)+len(clusterRoleBindings)+i] = result.Role.GetObject()
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("bootstrap policy: role %s/%s: %w", role.Namespace, role.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// roleModifier reads and writes Roles for the reconciler.
type roleModifier struct {
	ctx   context.Context
	store *registry.Store
}

func (m roleModifier) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	obj, err := m.store.Get(m.ctx, namespace, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleRuleOwner{Role: obj.(*rbacv1.Role)}, nil
}

func (m roleModifier) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := m.store.Create(m.ctx, in.GetNamespace(), in.GetObject(), &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleRuleOwner{Role: obj.(*rbacv1.Role)}, nil
}

func (m roleModifier) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, _, err := m.store.Update(m.ctx, in.GetNamespace(), in.GetName(), rest.DefaultUpdatedObjectInfo(in.GetObject()), &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.RoleRuleOwner{Role: obj.(*rbacv1.Role)}, nil
}

// reconcileWorkers is how many bootstrap objects Reconcile reads and writes at once.
const reconcileWorkers = 16

// clusterRoleModifier reads and writes ClusterRoles for the reconciler.
type clusterRoleModifier struct {
	ctx   context.Context
	store *registry.Store
}

func (m clusterRoleModifier) Get(_, name string) (reconciliation.RuleOwner, error) {
	obj, err := m.store.Get(m.ctx, "", name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (m clusterRoleModifier) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := m.store.Create(m.ctx, "", in.GetObject(), &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (m clusterRoleModifier) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, _, err := m.store.Update(m.ctx, "", in.GetName(), rest.DefaultUpdatedObjectInfo(in.GetObject()), &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

// clusterRoleBindingModifier reads and writes ClusterRoleBindings for the reconciler.
type clusterRoleBindingModifier struct {
	ctx   context.Context
	store *registry.Store
}

func (m clusterRoleBindingModifier) Get(_, name string) (reconciliation.RoleBinding, error) {
	obj, err := m.store.Get(m.ctx, "", name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}, nil
}

func (m clusterRoleBindingModifier) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := m.store.Create(m.ctx, "", in.GetObject(), &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}, nil
}

func (m clusterRoleBindingModifier) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, _, err := m.store.Update(m.ctx, "", in.GetName(), rest.DefaultUpdatedObjectInfo(in.GetObject()), &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}, nil
}

func (m clusterRoleBindingModifier) Delete(_, name string, uid types.UID) error {
	_, _, err := m.store.Delete(m.ctx, "", name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	return err
}
