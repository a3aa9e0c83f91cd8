package job

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestOrderedIntervalsWriteKubesCompressedFormat(t *testing.T) {
	for _, tc := range []struct {
		prev        string
		completions int
		add         []int
		want        string
		total       int
	}{
		{prev: "", completions: 10, add: []int{1, 3, 4, 5}, want: "1,3-5", total: 4},
		{prev: "", completions: 10, add: []int{3, 4}, want: "3,4", total: 2},
		{prev: "0,2", completions: 10, add: []int{1}, want: "0-2", total: 3},
		{prev: "0-2,7", completions: 10, add: []int{5, 9}, want: "0-2,5,7,9", total: 6},
		{prev: "2-8", completions: 5, add: nil, want: "2-4", total: 3}, // beyond completions after a scale-down
		{prev: "x,3", completions: 5, add: []int{0}, want: "0,3", total: 2},
	} {
		got := parseIndexesFromString(tc.prev, tc.completions).withOrderedIndexes(tc.add)
		if got.String() != tc.want || got.total() != tc.total {
			t.Errorf("%q + %v = %q (%d indexes), want %q (%d)", tc.prev, tc.add, got.String(), got.total(), tc.want, tc.total)
		}
	}
}

func TestMatchPodFailurePolicy(t *testing.T) {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = "ns", "p"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	policy := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 2}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{1, 2}}},
	}}
	msg, count, action := matchPodFailurePolicy(policy, pod)
	if msg == nil || *msg != "Container main for pod ns/p failed with exit code 3 matching FailJob rule at index 1" || !count || *action != batchv1.PodFailurePolicyActionFailJob {
		t.Errorf("FailJob: %v %v %v", msg, count, action)
	}
	policy.Rules[1] = batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}
	if msg, count, action := matchPodFailurePolicy(policy, pod); msg != nil || count || *action != batchv1.PodFailurePolicyActionIgnore {
		t.Errorf("Ignore: %v %v %v", msg, count, action)
	}
	policy.Rules = policy.Rules[:1]
	if msg, count, action := matchPodFailurePolicy(policy, pod); msg != nil || !count || action != nil {
		t.Errorf("no rule matches: %v %v %v", msg, count, action)
	}
}

func TestMatchSuccessPolicy(t *testing.T) {
	succeeded := parseIndexesFromString("0,2-4", 10)
	for _, tc := range []struct {
		rule batchv1.SuccessPolicyRule
		want bool
	}{
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptrTo("2-4")}, true},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptrTo("0-2")}, false},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptrTo("0-2"), SucceededCount: ptrTo(int32(2))}, true},
		{batchv1.SuccessPolicyRule{SucceededCount: ptrTo(int32(4))}, true},
		{batchv1.SuccessPolicyRule{SucceededCount: ptrTo(int32(5))}, false},
	} {
		msg, met := matchSuccessPolicy(&batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{tc.rule}}, 10, succeeded)
		if met != tc.want || (met && msg != "Matched rules at index 0") {
			t.Errorf("rule %+v: met %v (%q), want %v", tc.rule, met, msg, tc.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
