package bootstrappolicy

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"skiff.dev/services/apiserver/registry/rbac/validation"
)

func TestPolicyIsValidAndComplete(t *testing.T) {
	roles := map[string]rbacv1.ClusterRole{}
	for _, r := range ClusterRoles() {
		if _, dup := roles[r.Name]; dup {
			t.Errorf("ClusterRole %s twice", r.Name)
		}
		roles[r.Name] = r
		if errs := validation.ValidateClusterRole(&r); len(errs) > 0 {
			t.Errorf("ClusterRole %s: %v", r.Name, errs)
		}
		if r.Labels["kubernetes.io/bootstrapping"] != "rbac-defaults" || r.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("ClusterRole %s lacks the bootstrap label or autoupdate annotation", r.Name)
		}
	}
	for _, r := range Roles() {
		if errs := validation.ValidateRole(&r); len(errs) > 0 || r.Namespace == "" {
			t.Errorf("Role %s/%s: %v", r.Namespace, r.Name, errs)
		}
		if r.Labels["kubernetes.io/bootstrapping"] != "rbac-defaults" || r.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("Role %s lacks the bootstrap label or autoupdate annotation", r.Name)
		}
	}
	for _, b := range ClusterRoleBindings() {
		if errs := validation.ValidateClusterRoleBinding(&b); len(errs) > 0 {
			t.Errorf("ClusterRoleBinding %s: %v", b.Name, errs)
		}
		if _, ok := roles[b.RoleRef.Name]; !ok {
			t.Errorf("ClusterRoleBinding %s binds missing ClusterRole %s", b.Name, b.RoleRef.Name)
		}
		kubeadm := strings.HasPrefix(b.Name, "kubeadm:")
		if labelled := b.Labels["kubernetes.io/bootstrapping"] == "rbac-defaults"; labelled == kubeadm {
			t.Errorf("ClusterRoleBinding %s: bootstrap label %v (kubeadm's carry none)", b.Name, labelled)
		}
	}
}

// TestKubeRoles pins roles whose rules `kubectl get -o yaml` shows as a kubeadm
// cluster's do.
func TestKubeRoles(t *testing.T) {
	find := func(name string) rbacv1.ClusterRole {
		for _, r := range ClusterRoles() {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no ClusterRole %s", name)
		return rbacv1.ClusterRole{}
	}
	cases := []struct {
		role string
		want []rbacv1.PolicyRule
	}{
		{"system:node-bootstrapper", []rbacv1.PolicyRule{{Verbs: []string{"create", "get", "list", "watch"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}}}},
		{"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", []rbacv1.PolicyRule{{Verbs: []string{"create"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/selfnodeclient"}}}},
		{"cluster-admin", []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, {Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}},
		{"system:coredns", []rbacv1.PolicyRule{
			{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}},
			{Verbs: []string{"list", "watch"}, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
		}},
		{"system:controller:horizontal-pod-autoscaler", []rbacv1.PolicyRule{
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}},
			{Verbs: []string{"update"}, APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers/status"}},
			{Verbs: []string{"get", "update"}, APIGroups: []string{"*"}, Resources: []string{"*/scale"}},
			{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}},
			{Verbs: []string{"list", "watch"}, APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods"}},
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"custom.metrics.k8s.io"}, Resources: []string{"*"}},
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"external.metrics.k8s.io"}, Resources: []string{"*"}},
			{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
		}},
		{"system:controller:replication-controller", []rbacv1.PolicyRule{
			{Verbs: []string{"get", "list", "watch", "update"}, APIGroups: []string{""}, Resources: []string{"replicationcontrollers"}},
			{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"replicationcontrollers/status"}},
			{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"replicationcontrollers/finalizers"}},
			{Verbs: []string{"list", "watch", "patch", "create", "delete"}, APIGroups: []string{""}, Resources: []string{"pods"}},
			{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
		}},
		{"system:controller:resourcequota-controller", []rbacv1.PolicyRule{
			{Verbs: []string{"list", "watch"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"resourcequotas/status"}},
			{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
		}},
		{"system:volume-scheduler", []rbacv1.PolicyRule{
			{Verbs: []string{"get", "list", "watch", "update", "patch"}, APIGroups: []string{""}, Resources: []string{"persistentvolumes"}},
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}},
			{Verbs: []string{"get", "list", "watch", "update", "patch"}, APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}},
		}},
		{"system:monitoring", []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*"}}}},
		{"system:public-info-viewer", []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/livez", "/readyz", "/healthz", "/version", "/version/"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.role, func(t *testing.T) {
			if got := find(tc.role).Rules; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("rules %+v\nwant %+v", got, tc.want)
			}
		})
	}
	t.Run("system:monitoring is bound to the group system:monitoring", func(t *testing.T) {
		want := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:monitoring"}}
		for _, b := range ClusterRoleBindings() {
			if b.RoleRef.Name == "system:monitoring" && b.Name == "system:monitoring" && reflect.DeepEqual(b.Subjects, want) {
				return
			}
		}
		t.Fatal("no ClusterRoleBinding system:monitoring of the group system:monitoring")
	})
	t.Run("admin, edit and view aggregate by label", func(t *testing.T) {
		for role, label := range map[string]string{"admin": AggregateToAdmin, "edit": AggregateToEdit, "view": AggregateToView} {
			r := find(role)
			if r.AggregationRule == nil || r.AggregationRule.ClusterRoleSelectors[0].MatchLabels[label] != "true" || len(r.Rules) != 0 {
				t.Errorf("%s: aggregationRule %+v rules %d", role, r.AggregationRule, len(r.Rules))
			}
		}
	})
}
