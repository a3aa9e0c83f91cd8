package bootstrappolicy_test

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/auth/rbac/validation"

	"skiff.dev/services/apiserver/authorization/rbac/bootstrappolicy"
	"skiff.dev/services/controlplanetest"
)

// TestReconcileAtStart restarts a real apiserver over the same etcd: the bootstrap
// policy comes back where it was removed, what users added stays, and a role annotated
// autoupdate "false" is left as the user left it.
func TestReconcileAtStart(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config).RbacV1()
	ctx := context.Background()

	basic, err := admin.ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A user adds a rule and drops one of the policy's.
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	basic.Rules = []rbacv1.PolicyRule{basic.Rules[1], extra}
	if _, err := admin.ClusterRoles().Update(ctx, basic, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// And empties another role, opting it out of reconciliation.
	discovery, err := admin.ClusterRoles().Get(ctx, "system:discovery", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	discovery.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	discovery.Rules = []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/version"}}}
	if _, err := admin.ClusterRoles().Update(ctx, discovery, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// And deletes a binding.
	if err := admin.ClusterRoleBindings().Delete(ctx, "system:kube-scheduler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	srv.RestartAPIServer()

	t.Run("a removed rule is restored and a user's rule kept", func(t *testing.T) {
		got, err := admin.ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var want []rbacv1.PolicyRule
		for _, r := range bootstrappolicy.ClusterRoles() {
			if r.Name == "system:basic-user" {
				want = r.Rules
			}
		}
		// The reconciler adds what is missing one verb and resource at a time, as kube's.
		if covered, missing := validation.Covers(got.Rules, append(want, extra)); !covered {
			t.Errorf("rules %+v miss %+v", got.Rules, missing)
		}
	})
	t.Run("autoupdate false is left alone", func(t *testing.T) {
		got, err := admin.ClusterRoles().Get(ctx, "system:discovery", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rules) != 1 || len(got.Rules[0].NonResourceURLs) != 1 {
			t.Fatalf("rules %+v", got.Rules)
		}
	})
	t.Run("a deleted binding is recreated", func(t *testing.T) {
		got, err := admin.ClusterRoleBindings().Get(ctx, "system:kube-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Subjects) != 1 || got.Subjects[0].Name != "system:kube-scheduler" {
			t.Fatalf("subjects %+v", got.Subjects)
		}
	})
}
