package apiserver_test

import (
	"context"
	"math"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func indexedJob(name string, completions int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(completions),
			Parallelism:    ptr.To(completions),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
			}},
		},
	}
}

// wantInvalid asserts a 422 Invalid whose message holds want.
func wantInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want 422 Invalid with %q", what, err, want)
	}
}

// TestJobsServeIndexedModeAndPolicies: Indexed Jobs, pod failure policies,
// backoffLimitPerIndex and success policies are accepted and defaulted as kube 1.32
// does, bad ones are refused with kube's 422 messages, and the update rules hold
// (elastic Indexed completions, immutable policies and managedBy, status format).
func TestJobsServeIndexedModeAndPolicies(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	jobs := cs.BatchV1().Jobs("default")

	j := indexedJob("work", 3)
	j.Spec.BackoffLimitPerIndex = ptr.To(int32(1))
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}},
	}}
	j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0,2")}}}
	got, err := jobs.Create(ctx, j, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.BackoffLimit != math.MaxInt32 || *got.Spec.PodReplacementPolicy != batchv1.Failed ||
		got.Spec.PodFailurePolicy.Rules[1].OnPodConditions[0].Status != corev1.ConditionTrue || !ptr.Equal(got.Spec.ManualSelector, ptr.To(false)) {
		t.Errorf("defaults: backoffLimit %d podReplacementPolicy %s rules %+v manualSelector %v", *got.Spec.BackoffLimit,
			*got.Spec.PodReplacementPolicy, got.Spec.PodFailurePolicy.Rules, got.Spec.ManualSelector)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*batchv1.Job)
		want   string
	}{
		{"completions required", func(j *batchv1.Job) { j.Spec.Completions = nil },
			"spec.completions: Required value: when completion mode is Indexed"},
		{"FailIndex without backoffLimitPerIndex", func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailIndex,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}}}
		}, `spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set`},
		{"pod failure policy with OnFailure", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}}}
		}, `spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`},
		{"parallelism over 10^5", func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To(int32(100_001)) },
			"spec.parallelism: Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed"},
		{"successPolicy of a NonIndexed Job", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(int32(1))}}}
		}, "requires indexed completion mode"},
	} {
		bad := indexedJob("bad", 3)
		tc.mutate(bad)
		_, err := jobs.Create(ctx, bad, metav1.CreateOptions{})
		wantInvalid(t, tc.name, err, tc.want)
	}

	// Completions of an Indexed Job change only with parallelism.
	got.Spec.Completions = ptr.To(int32(5))
	_, err = jobs.Update(ctx, got, metav1.UpdateOptions{})
	wantInvalid(t, "completions alone", err, "spec.completions: Invalid value: 5: can only be modified in tandem with spec.parallelism")
	got.Spec.Parallelism = ptr.To(int32(5))
	if got, err = jobs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("completions with parallelism: %v", err)
	}
	got.Spec.ManagedBy = ptr.To("example.com/queue")
	_, err = jobs.Update(ctx, got, metav1.UpdateOptions{})
	wantInvalid(t, "managedBy", err, "spec.managedBy: Invalid value: \"example.com/queue\": field is immutable")

	got, _ = jobs.Get(ctx, "work", metav1.GetOptions{})
	got.Status.CompletedIndexes = "3,1"
	_, err = jobs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	wantInvalid(t, "completedIndexes out of order", err, `status.completedIndexes: Invalid value: "3,1": error parsing completedIndexes: non-increasing order, previous: 3, current: 1`)
	got.Status.CompletedIndexes = "0-2"
	got.Status.Succeeded = 3
	if _, err := jobs.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Errorf("completedIndexes 0-2: %v", err)
	}
}
