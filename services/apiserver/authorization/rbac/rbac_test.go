package rbac

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func subject(kind, name string) rbacv1.Subject {
	s := rbacv1.Subject{Kind: kind, Name: name}
	if kind != rbacv1.ServiceAccountKind {
		s.APIGroup = rbacv1.GroupName
	}
	return s
}

// testPolicy is a small cluster's policy, filled by hand.
func testPolicy(t *testing.T) *Authorizer {
	t.Helper()
	policy, ix := NewPolicyFromIndexers()
	add := func(indexer interface{ Add(any) error }, obj any) {
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	read := []string{"get", "list", "watch"}
	add(ix.ClusterRoles, clusterRole("pod-reader", rbacv1.PolicyRule{Verbs: read, APIGroups: []string{""}, Resources: []string{"pods"}}))
	add(ix.ClusterRoles, clusterRole("health", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/logs/*"}}))
	add(ix.ClusterRoles, clusterRole("log-reader", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods/log"}}))
	add(ix.ClusterRoles, clusterRole("root", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}))
	add(ix.ClusterRoles, clusterRole("status-writer", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"*"}, Resources: []string{"*/status"}}))
	add(ix.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-a", Name: "secret-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"s1"}}}})

	crb := func(name, role string, subjects ...rbacv1.Subject) {
		add(ix.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects})
	}
	rb := func(ns, name, kind, role string, subjects ...rbacv1.Subject) {
		add(ix.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}, Subjects: subjects})
	}
	crb("alice-reads-pods", "pod-reader", subject(rbacv1.UserKind, "alice"))
	crb("health", "health", subject(rbacv1.GroupKind, user.AllAuthenticated))
	crb("root", "root", subject(rbacv1.UserKind, "root"))
	crb("sam-writes-status", "status-writer", subject(rbacv1.UserKind, "sam"))
	crb("dan-ghost", "ghost", subject(rbacv1.UserKind, "dan"))
	rb("ns-a", "team-b-reads-pods", "ClusterRole", "pod-reader", subject(rbacv1.GroupKind, "team-b"))
	rb("ns-a", "carol-reads-s1", "Role", "secret-reader", subject(rbacv1.UserKind, "carol"))
	rb("ns-a", "default-reads-logs", "ClusterRole", "log-reader", subject(rbacv1.ServiceAccountKind, "default"))
	return New(policy)
}

func TestAuthorize(t *testing.T) {
	a := testPolicy(t)
	u := func(name string, groups ...string) user.Info {
		return &user.DefaultInfo{Name: name, Groups: append(groups, user.AllAuthenticated)}
	}
	res := func(who user.Info, verb, ns, group, resource, sub, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: who, Verb: verb, Namespace: ns, APIGroup: group, Resource: resource, Subresource: sub, Name: name, ResourceRequest: true}
	}
	path := func(who user.Info, verb, p string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: who, Verb: verb, Path: p}
	}
	cases := []struct {
		name       string
		attrs      authorizer.AttributesRecord
		want       authorizer.Decision
		wantReason string
	}{
		{"a ClusterRoleBinding grants in every namespace", res(u("alice"), "list", "ns-x", "", "pods", "", ""), authorizer.DecisionAllow, ""},
		{"a ClusterRoleBinding grants at the cluster scope", res(u("alice"), "watch", "", "", "pods", "", ""), authorizer.DecisionAllow, ""},
		{"a ClusterRole grants only its verbs", res(u("alice"), "delete", "ns-x", "", "pods", "", "p"), authorizer.DecisionNoOpinion, ""},
		{"a ClusterRole grants only its group", res(u("alice"), "list", "ns-x", "apps", "pods", "", ""), authorizer.DecisionNoOpinion, ""},
		{"a RoleBinding to a ClusterRole grants in its namespace", res(u("bob", "team-b"), "list", "ns-a", "", "pods", "", ""), authorizer.DecisionAllow, ""},
		{"a RoleBinding grants nothing in another namespace", res(u("bob", "team-b"), "list", "ns-b", "", "pods", "", ""), authorizer.DecisionNoOpinion, ""},
		{"a RoleBinding grants nothing cluster-wide", res(u("bob", "team-b"), "list", "", "", "pods", "", ""), authorizer.DecisionNoOpinion, ""},
		{"a Role's resourceNames allow the named object", res(u("carol"), "get", "ns-a", "", "secrets", "", "s1"), authorizer.DecisionAllow, ""},
		{"a Role's resourceNames deny another object", res(u("carol"), "get", "ns-a", "", "secrets", "", "s2"), authorizer.DecisionNoOpinion, ""},
		{"a Role's resourceNames deny a list", res(u("carol"), "list", "ns-a", "", "secrets", "", ""), authorizer.DecisionNoOpinion, ""},
		{"nonResourceURLs match exactly", path(u("anyone"), "get", "/healthz"), authorizer.DecisionAllow, ""},
		{"nonResourceURLs with * match a prefix", path(u("anyone"), "get", "/logs/kubelet.log"), authorizer.DecisionAllow, ""},
		{"nonResourceURLs grant only their verbs", path(u("anyone"), "post", "/healthz"), authorizer.DecisionNoOpinion, ""},
		{"nonResourceURLs do not match a longer path", path(u("anyone"), "get", "/healthz/etcd"), authorizer.DecisionNoOpinion, ""},
		{"a subresource rule allows the subresource", res(u("system:serviceaccount:ns-a:default"), "get", "ns-a", "", "pods", "log", "p"), authorizer.DecisionAllow, ""},
		{"a subresource rule does not allow the resource", res(u("system:serviceaccount:ns-a:default"), "get", "ns-a", "", "pods", "", "p"), authorizer.DecisionNoOpinion, ""},
		{"a ServiceAccount subject is the account of the binding's namespace only", res(u("system:serviceaccount:ns-b:default"), "get", "ns-a", "", "pods", "log", "p"), authorizer.DecisionNoOpinion, ""},
		{"* allows every verb, group and resource", res(u("root"), "delete", "", "apps", "deployments", "", "d"), authorizer.DecisionAllow, ""},
		{"* allows subresources", res(u("root"), "update", "", "", "nodes", "status", "n"), authorizer.DecisionAllow, ""},
		{"*/status allows any status subresource", res(u("sam"), "update", "ns-x", "apps", "deployments", "status", "d"), authorizer.DecisionAllow, ""},
		{"*/status does not allow the resource", res(u("sam"), "update", "ns-x", "apps", "deployments", "", "d"), authorizer.DecisionNoOpinion, ""},
		{"a binding to a missing role says so", res(u("dan"), "get", "", "", "pods", "", "p"), authorizer.DecisionNoOpinion, `RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found`},
		{"a user with no binding gets no opinion and no reason", res(u("eve"), "get", "ns-a", "", "pods", "", "p"), authorizer.DecisionNoOpinion, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("decision %v reason %q, want %v %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

func TestRulesFor(t *testing.T) {
	a := testPolicy(t)
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"team-b", user.AllAuthenticated}}
	t.Run("cluster-wide and namespace rules, bindings in name order", func(t *testing.T) {
		resources, nonResources, incomplete, err := a.RulesFor(context.Background(), bob, "ns-a")
		if err != nil || incomplete {
			t.Fatalf("err %v incomplete %v", err, incomplete)
		}
		if len(resources) != 1 || resources[0].GetResources()[0] != "pods" {
			t.Fatalf("resource rules %+v", resources)
		}
		if len(nonResources) != 1 || nonResources[0].GetNonResourceURLs()[0] != "/healthz" {
			t.Fatalf("non-resource rules %+v", nonResources)
		}
	})
	t.Run("another namespace has only the cluster-wide rules", func(t *testing.T) {
		resources, _, _, _ := a.RulesFor(context.Background(), bob, "ns-b")
		if len(resources) != 0 {
			t.Fatalf("resource rules %+v", resources)
		}
	})
}
