package rbac

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// BenchmarkAuthorize measures one decision in a policy of 1000 namespaces, each with a
// RoleBinding of its own user to view-like rules, plus the cluster-wide bindings every
// user meets: the indexes keep it independent of the number of bindings.
func BenchmarkAuthorize(b *testing.B) {
	policy, ix := NewPolicyFromIndexers()
	read := []string{"get", "list", "watch"}
	_ = ix.ClusterRoles.Add(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "view"}, Rules: []rbacv1.PolicyRule{
		{Verbs: read, APIGroups: []string{""}, Resources: []string{"configmaps", "services", "pods"}},
		{Verbs: read, APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}},
	}})
	_ = ix.ClusterRoles.Add(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "basic"}, Rules: []rbacv1.PolicyRule{
		{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}},
	}})
	_ = ix.ClusterRoleBindings.Add(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "basic"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "basic"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: user.AllAuthenticated}}})
	for i := range 1000 {
		_ = ix.RoleBindings.Add(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i), Name: "view"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i)}}})
	}
	a := New(policy)
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "user-500", Groups: []string{user.AllAuthenticated}},
		Verb: "list", Namespace: "ns-500", APIGroup: "apps", Resource: "replicasets", ResourceRequest: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _, _ := a.Authorize(ctx, attrs); d != authorizer.DecisionAllow {
			b.Fatal("denied")
		}
	}
}
