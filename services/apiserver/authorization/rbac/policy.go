package rbac

import (
	"context"
	"fmt"
	"strconv"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"skiff.dev/services/apiserver/registry"
)

// subjectIndex indexes bindings by the subjects they bind (see subjectKey).
const subjectIndex = "subject"

// Policy is the RBAC objects in memory: one informer per resource over the apiserver's
// own registry Stores (a list, then a watch from the watch cache, as client-go's
// informers do over HTTP), bindings indexed by subject so that a request looks up only
// the bindings of its user and groups. Mirrors the informers kube-apiserver's RBAC
// authorizer reads through its listers.
type Policy struct {
	roles, clusterRoles, roleBindings, clusterRoleBindings cache.Indexer

	informers           []cache.SharedIndexInformer // none in a policy from NewPolicyFromIndexers
	clusterRoleInformer cache.SharedIndexInformer
}

// Indexers are where a Policy keeps each resource.
type Indexers struct {
	Roles, ClusterRoles, RoleBindings, ClusterRoleBindings cache.Indexer
}

var indexers = struct{ roles, clusterRoles, roleBindings, clusterRoleBindings cache.Indexers }{
	roles:               cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	clusterRoles:        cache.Indexers{},
	roleBindings:        cache.Indexers{subjectIndex: roleBindingSubjects},
	clusterRoleBindings: cache.Indexers{subjectIndex: clusterRoleBindingSubjects},
}

// NewPolicy builds the informers. stores is read when Run starts them, so it may still
// be filling while the apiserver is being built.
func NewPolicy(stores registry.Stores) *Policy {
	newInformer := func(resource string, obj runtime.Object, ix cache.Indexers) cache.SharedIndexInformer {
		lw := &registry.ListWatch{Stores: stores, Resource: rbacv1.Resource(resource)}
		return cache.NewSharedIndexInformer(lw, obj, 0, ix)
	}
	roles := newInformer("roles", &rbacv1.Role{}, indexers.roles)
	clusterRoles := newInformer("clusterroles", &rbacv1.ClusterRole{}, indexers.clusterRoles)
	roleBindings := newInformer("rolebindings", &rbacv1.RoleBinding{}, indexers.roleBindings)
	clusterRoleBindings := newInformer("clusterrolebindings", &rbacv1.ClusterRoleBinding{}, indexers.clusterRoleBindings)
	return &Policy{
		roles: roles.GetIndexer(), clusterRoles: clusterRoles.GetIndexer(),
		roleBindings: roleBindings.GetIndexer(), clusterRoleBindings: clusterRoleBindings.GetIndexer(),
		informers:           []cache.SharedIndexInformer{roles, clusterRoles, roleBindings, clusterRoleBindings},
		clusterRoleInformer: clusterRoles,
	}
}

// NewPolicyFromIndexers is a Policy over indexers the caller fills (tests of the
// authorizer's rules): nothing watches anything, and Run returns at once.
func NewPolicyFromIndexers() (*Policy, Indexers) {
	ix := Indexers{
		Roles:               cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers.roles),
		ClusterRoles:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers.clusterRoles),
		RoleBindings:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers.roleBindings),
		ClusterRoleBindings: cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers.clusterRoleBindings),
	}
	return &Policy{roles: ix.Roles, clusterRoles: ix.ClusterRoles, roleBindings: ix.RoleBindings, clusterRoleBindings: ix.ClusterRoleBindings}, ix
}

// Run starts the informers and blocks until ctx ends.
func (p *Policy) Run(ctx context.Context) {
	done := make(chan struct{})
	for _, inf := range p.informers {
		go func() {
			inf.RunWithContext(ctx)
			done <- struct{}{}
		}()
	}
	for range p.informers {
		<-done
	}
}

// HasSynced is true once every informer has listed its resource.
func (p *Policy) HasSynced() bool {
	for _, inf := range p.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// ClusterRoles is where the policy keeps ClusterRoles (by name).
func (p *Policy) ClusterRoles() cache.Indexer { return p.clusterRoles }

// WaitFor waits until the policy holds each of objs (Roles, ClusterRoles and bindings)
// at its resourceVersion or later, so a request made after a write is authorized
// against it. Errors: ctx's.
func (p *Policy) WaitFor(ctx context.Context, objs ...runtime.Object) error {
	return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, obj := range objs {
			if !p.holds(obj) {
				return false, nil
			}
		}
		return true, nil
	})
}

func (p *Policy) holds(obj runtime.Object) bool {
	var indexer cache.Indexer
	switch obj.(type) {
	case *rbacv1.Role:
		indexer = p.roles
	case *rbacv1.ClusterRole:
		indexer = p.clusterRoles
	case *rbacv1.RoleBinding:
		indexer = p.roleBindings
	case *rbacv1.ClusterRoleBinding:
		indexer = p.clusterRoleBindings
	default:
		return true
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return true
	}
	held, ok, _ := indexer.GetByKey(key)
	if !ok {
		return false
	}
	return resourceVersion(held) >= resourceVersion(obj)
}

func resourceVersion(obj any) uint64 {
	m, ok := obj.(metav1.Object)
	if !ok {
		return 0
	}
	rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return rv
}

// subjectKey names one subject in the index: "User:alice", "Group:system:masters",
// "ServiceAccount:kube-system:default".
func subjectKey(kind, namespace, name string) string {
	if kind == rbacv1.ServiceAccountKind {
		return kind + ":" + namespace + ":" + name
	}
	return kind + ":" + name
}

// clusterRoleBindingSubjects indexes a ClusterRoleBinding by each subject.
func clusterRoleBindingSubjects(obj any) ([]string, error) {
	b, ok := obj.(*rbacv1.ClusterRoleBinding)
	if !ok {
		return nil, fmt.Errorf("not a ClusterRoleBinding: %T", obj)
	}
	keys := make([]string, 0, len(b.Subjects))
	for _, s := range b.Subjects {
		keys = append(keys, subjectKey(s.Kind, s.Namespace, s.Name))
	}
	return keys, nil
}

// roleBindingSubjects indexes a RoleBinding by namespace/subject; a ServiceAccount
// subject without a namespace is in the binding's namespace, as kube's appliesToUser
// reads it.
func roleBindingSubjects(obj any) ([]string, error) {
	b, ok := obj.(*rbacv1.RoleBinding)
	if !ok {
		return nil, fmt.Errorf("not a RoleBinding: %T", obj)
	}
	keys := make([]string, 0, len(b.Subjects))
	for _, s := range b.Subjects {
		ns := s.Namespace
		if ns == "" {
			ns = b.Namespace
		}
		keys = append(keys, b.Namespace+"/"+subjectKey(s.Kind, ns, s.Name))
	}
	return keys, nil
}
