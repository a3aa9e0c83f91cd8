package validation

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateClusterRole(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "system:node-bootstrapper"}
	cases := []struct {
		name      string
		role      rbacv1.ClusterRole
		wantField string // "" means valid
	}{
		{"a name with colons is valid", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}, ""},
		{"a name with a slash is refused", rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "a/b"}}, "metadata.name"},
		{"a rule needs verbs", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}, "rules[0].verbs"},
		{"a resource rule needs apiGroups", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, Resources: []string{"pods"}}}}, "rules[0].apiGroups"},
		{"a resource rule needs resources", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}}}}, "rules[0].resources"},
		{"nonResourceURLs alone are valid in a cluster role", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}}, ""},
		{"nonResourceURLs with resources are refused", rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}, Resources: []string{"pods"}}}}, "rules[0].nonResourceURLs"},
		{"an aggregationRule needs a selector", rbacv1.ClusterRole{ObjectMeta: meta, AggregationRule: &rbacv1.AggregationRule{}}, "aggregationRule.clusterRoleSelectors"},
		{"an aggregationRule's selector must be valid", rbacv1.ClusterRole{ObjectMeta: meta, AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"bad key!": "x"}}}}}, "aggregationRule.clusterRoleSelectors[0].matchLabels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateClusterRole(&tc.role)
			if tc.wantField == "" {
				if len(errs) > 0 {
					t.Fatalf("errors: %v", errs)
				}
				return
			}
			if len(errs) == 0 || errs[0].Field != tc.wantField {
				t.Fatalf("errors %v, want one on %s", errs, tc.wantField)
			}
		})
	}
}

func TestValidateRoleRefusesNonResourceURLs(t *testing.T) {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}}
	if errs := ValidateRole(role); len(errs) != 1 || errs[0].Field != "rules[0].nonResourceURLs" {
		t.Fatalf("errors %v", errs)
	}
}

func TestValidateBindings(t *testing.T) {
	ref := func(kind string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: "r"}
	}
	user := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default"}
	cases := []struct {
		name      string
		cluster   bool
		ref       rbacv1.RoleRef
		subject   rbacv1.Subject
		wantField string
	}{
		{"a RoleBinding to a Role", false, ref("Role"), user, ""},
		{"a RoleBinding to a ClusterRole", false, ref("ClusterRole"), user, ""},
		{"a ClusterRoleBinding to a Role is refused", true, ref("Role"), user, "roleRef.kind"},
		{"a roleRef of another group is refused", false, rbacv1.RoleRef{APIGroup: "example.com", Kind: "Role", Name: "r"}, user, "roleRef.apiGroup"},
		{"a roleRef needs a name", false, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role"}, user, "roleRef.name"},
		{"a ServiceAccount in a RoleBinding may omit its namespace", false, ref("Role"), sa, ""},
		{"a ServiceAccount in a ClusterRoleBinding needs its namespace", true, ref("ClusterRole"), sa, "subjects[0].namespace"},
		{"a ServiceAccount name must be a DNS subdomain", false, ref("Role"), rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "Bad_Name"}, "subjects[0].name"},
		{"a User of the core group is refused", false, ref("Role"), rbacv1.Subject{Kind: rbacv1.UserKind, Name: "jane"}, "subjects[0].apiGroup"},
		{"an unknown subject kind is refused", false, ref("Role"), rbacv1.Subject{Kind: "Robot", Name: "r2"}, "subjects[0].kind"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var errs []string
			if tc.cluster {
				for _, e := range ValidateClusterRoleBinding(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: tc.ref, Subjects: []rbacv1.Subject{tc.subject}}) {
					errs = append(errs, e.Field)
				}
			} else {
				for _, e := range ValidateRoleBinding(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}, RoleRef: tc.ref, Subjects: []rbacv1.Subject{tc.subject}}) {
					errs = append(errs, e.Field)
				}
			}
			if tc.wantField == "" && len(errs) > 0 || tc.wantField != "" && (len(errs) == 0 || errs[0] != tc.wantField) {
				t.Fatalf("errors on %v, want %q", errs, tc.wantField)
			}
		})
	}
}

func TestValidateRoleBindingUpdateKeepsRoleRef(t *testing.T) {
	old := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", ResourceVersion: "1"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r"}}
	changed := old.DeepCopy()
	changed.RoleRef.Name = "other"
	if errs := ValidateRoleBindingUpdate(changed, old); len(errs) != 1 || errs[0].Detail != "cannot change roleRef" {
		t.Fatalf("errors %v", errs)
	}
}
