package clusterroleaggregation

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAggregate(t *testing.T) {
	rule := func(resource string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{resource}}
	}
	role := func(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
	}
	selecting := func(keys ...string) *rbacv1.ClusterRole {
		r := role("agg", map[string]string{"a": "true"})
		r.AggregationRule = &rbacv1.AggregationRule{}
		for _, k := range keys {
			r.AggregationRule.ClusterRoleSelectors = append(r.AggregationRule.ClusterRoleSelectors, metav1.LabelSelector{MatchLabels: map[string]string{k: "true"}})
		}
		return r
	}
	cases := []struct {
		name string
		agg  *rbacv1.ClusterRole
		all  []*rbacv1.ClusterRole
		want []rbacv1.PolicyRule
	}{
		{"matching roles' rules in name order", selecting("a"),
			[]*rbacv1.ClusterRole{role("z", map[string]string{"a": "true"}, rule("secrets")), role("m", map[string]string{"a": "true"}, rule("pods"))},
			[]rbacv1.PolicyRule{rule("pods"), rule("secrets")}},
		{"roles that do not match are left out", selecting("a"),
			[]*rbacv1.ClusterRole{role("m", map[string]string{"b": "true"}, rule("pods"))}, nil},
		{"a rule held by two roles appears once", selecting("a"),
			[]*rbacv1.ClusterRole{role("m", map[string]string{"a": "true"}, rule("pods")), role("n", map[string]string{"a": "true"}, rule("pods"))},
			[]rbacv1.PolicyRule{rule("pods")}},
		{"selectors in order, each gathering in name order", selecting("b", "a"),
			[]*rbacv1.ClusterRole{role("m", map[string]string{"a": "true"}, rule("pods")), role("n", map[string]string{"b": "true"}, rule("secrets"))},
			[]rbacv1.PolicyRule{rule("secrets"), rule("pods")}},
		{"the aggregated role does not gather itself", selecting("a"), nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all := append([]*rbacv1.ClusterRole{tc.agg}, tc.all...)
			if got := Aggregate(tc.agg, all); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("rules %+v, want %+v", got, tc.want)
			}
		})
	}
}
