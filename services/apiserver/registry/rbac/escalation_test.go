package rbac_test

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	authzrbac "skiff.dev/services/apiserver/authorization/rbac"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
)

// guard is the escalation check over a policy where jane reads pods in ns-a, rita may
// escalate on roles in ns-a and bob may bind the pod-reader ClusterRole there.
func guard(t *testing.T) *rbacregistry.Guard {
	t.Helper()
	policy, ix := authzrbac.NewPolicyFromIndexers()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	clusterRole := func(name string, rules ...rbacv1.PolicyRule) {
		must(ix.ClusterRoles.Add(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}))
	}
	bind := func(name, role, who string) {
		must(ix.RoleBindings.Add(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-a", Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: who}}}))
	}
	clusterRole("pod-reader", rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}})
	clusterRole("role-escalator", rbacv1.PolicyRule{Verbs: []string{"escalate"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}})
	clusterRole("pod-reader-binder", rbacv1.PolicyRule{Verbs: []string{"bind"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"pod-reader"}})
	bind("jane", "pod-reader", "jane")
	bind("rita", "role-escalator", "rita")
	bind("bob", "pod-reader-binder", "bob")
	a := authzrbac.New(policy)
	return &rbacregistry.Guard{Authorizer: a, Resolver: a.Resolver}
}

func as(name string, groups ...string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name, Groups: append(groups, user.AllAuthenticated)})
}

func TestConfirmRole(t *testing.T) {
	g := guard(t)
	roles := rbacv1.Resource("roles")
	readPods := []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}
	deletePods := []rbacv1.PolicyRule{{Verbs: []string{"delete", "get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}
	cases := []struct {
		name        string
		ctx         context.Context
		namespace   string
		rules       []rbacv1.PolicyRule
		aggregation bool
		wantMessage string // "" means allowed
	}{
		{"a user grants what it holds", as("jane"), "ns-a", readPods, false, ""},
		{"a user may not grant more than it holds", as("jane"), "ns-a", deletePods, false,
			`roles.rbac.authorization.k8s.io "r" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}`},
		{"a user holds nothing in another namespace", as("jane"), "ns-b", readPods, false,
			`roles.rbac.authorization.k8s.io "r" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`},
		{"escalate on roles lets a user grant anything", as("rita"), "ns-a", deletePods, false, ""},
		{"system:masters grants anything", as("admin", user.SystemPrivilegedGroup), "ns-b", deletePods, false, ""},
		{"an aggregationRule needs cluster-admin's rules", as("jane"), "ns-a", nil, true,
			`roles.rbac.authorization.k8s.io "r" is forbidden: must have cluster-admin privileges to use the aggregationRule`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := g.ConfirmRole(tc.ctx, roles, tc.namespace, "r", tc.rules, tc.aggregation)
			if tc.wantMessage == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || err.Error() != tc.wantMessage {
				t.Fatalf("error\n got %v\nwant %s", err, tc.wantMessage)
			}
		})
	}
}

func TestConfirmBinding(t *testing.T) {
	g := guard(t)
	rolebindings := rbacv1.Resource("rolebindings")
	ref := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	}
	cases := []struct {
		name      string
		ctx       context.Context
		namespace string
		ref       rbacv1.RoleRef
		check     func(error) bool
	}{
		{"a user binds a role whose rules it holds", as("jane"), "ns-a", ref("pod-reader"), func(err error) bool { return err == nil }},
		{"bind on the role lets a user bind what it does not hold", as("bob"), "ns-a", ref("pod-reader"), func(err error) bool { return err == nil }},
		{"bind is per role", as("bob"), "ns-a", ref("role-escalator"), apierrors.IsForbidden},
		{"a user may not bind a role with more than it holds", as("jane"), "ns-a", ref("role-escalator"), apierrors.IsForbidden},
		{"a binding to a missing role is 404", as("jane"), "ns-a", ref("ghost"), apierrors.IsNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := g.ConfirmBinding(tc.ctx, rolebindings, tc.namespace, "b", tc.ref); !tc.check(err) {
				t.Fatalf("error %v", err)
			}
		})
	}
}
