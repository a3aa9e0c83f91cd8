package defaultpreemption

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/scheduler/framework"
)

func podOf(name string, priority int32, started time.Time, labels map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
		Spec:       v1.PodSpec{Priority: ptr.To(priority)},
		Status:     v1.PodStatus{StartTime: &metav1.Time{Time: started}},
	}
}

// TestPickOneNodeForPreemption: each rule decides in kube's order, the next one only
// among the nodes the previous ones tied.
func TestPickOneNodeForPreemption(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(priority int32, minute int) *v1.Pod {
		return podOf("p", priority, t0.Add(time.Duration(minute)*time.Minute), nil)
	}
	for _, tc := range []struct {
		name       string
		candidates []candidate
		want       string
	}{
		{"fewest budget violations", []candidate{
			{node: "a", victims: []*v1.Pod{p(1, 0)}, pdbViolations: 1},
			{node: "b", victims: []*v1.Pod{p(5, 0), p(5, 0)}, pdbViolations: 0},
		}, "b"},
		{"lowest top victim priority", []candidate{
			{node: "a", victims: []*v1.Pod{p(5, 0)}},
			{node: "b", victims: []*v1.Pod{p(3, 0), p(3, 0)}},
		}, "b"},
		{"lowest priority sum", []candidate{
			{node: "a", victims: []*v1.Pod{p(3, 0), p(2, 0)}},
			{node: "b", victims: []*v1.Pod{p(3, 0), p(1, 0)}},
		}, "b"},
		{"fewest victims", []candidate{
			{node: "a", victims: []*v1.Pod{p(-5, 0), p(-5, 0)}},
			{node: "b", victims: []*v1.Pod{p(-5, 0)}},
		}, "b"},
		{"latest start of the top victims", []candidate{
			{node: "a", victims: []*v1.Pod{p(3, 1)}},
			{node: "b", victims: []*v1.Pod{p(3, 9)}},
		}, "b"},
		{"first of equals", []candidate{
			{node: "a", victims: []*v1.Pod{p(3, 1)}},
			{node: "b", victims: []*v1.Pod{p(3, 1)}},
		}, "a"},
	} {
		if got := pickOneNodeForPreemption(tc.candidates).node; got != tc.want {
			t.Errorf("%s: picked %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestFilterPodsWithPDBViolation: a budget allowing one disruption lets the first of
// its pods go and counts the second as a violation; a pod it already counts as
// disrupted costs nothing; pods of another namespace or without matching labels are
// not its.
func TestFilterPodsWithPDBViolation(t *testing.T) {
	web := map[string]string{"app": "web"}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, DisruptedPods: map[string]metav1.Time{"already": {}}},
	}
	other := podOf("other-ns", 0, time.Time{}, web)
	other.Namespace = "elsewhere"
	pods := []*framework.PodInfo{
		{Pod: podOf("already", 0, time.Time{}, web)},
		{Pod: podOf("first", 0, time.Time{}, web)},
		{Pod: podOf("second", 0, time.Time{}, web)},
		{Pod: podOf("db", 0, time.Time{}, map[string]string{"app": "db"})},
		{Pod: other},
	}
	violating, nonViolating := filterPodsWithPDBViolation(pods, []*policyv1.PodDisruptionBudget{pdb})
	names := func(pis []*framework.PodInfo) (out []string) {
		for _, pi := range pis {
			out = append(out, pi.Pod.Name)
		}
		return out
	}
	if got := names(violating); len(got) != 1 || got[0] != "second" {
		t.Errorf("violating %v, want [second]", got)
	}
	if got := names(nonViolating); len(got) != 4 {
		t.Errorf("non-violating %v, want already, first, db, other-ns", got)
	}
}
