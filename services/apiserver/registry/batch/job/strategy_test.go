package job

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func valid() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pi", Namespace: "default", UID: types.UID("uid-1")},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}
}

// indexed makes the Job Indexed with completions (parallelism 1), then applies more.
func indexed(completions int32, more func(*batchv1.Job)) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.CompletionMode, j.Spec.Completions = ptr.To(batchv1.IndexedCompletion), ptr.To(completions)
		if more != nil {
			more(j)
		}
	}
}

// withPolicy gives the Job a pod failure policy of rules.
func withPolicy(rules ...batchv1.PodFailurePolicyRule) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules} }
}

func TestPrepareForCreateDefaultsAndGeneratesTheSelector(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		completions, parallelism      *int32
		wantCompletions               *int32
		wantParallelism, wantBackoffs int32
	}{
		{name: "neither set: one pod to completion", wantCompletions: ptr.To(int32(1)), wantParallelism: 1, wantBackoffs: 6},
		{name: "parallelism only: a work queue", parallelism: ptr.To(int32(3)), wantParallelism: 3, wantBackoffs: 6},
		{name: "completions only", completions: ptr.To(int32(5)), wantCompletions: ptr.To(int32(5)), wantParallelism: 1, wantBackoffs: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := valid()
			j.Spec.Completions, j.Spec.Parallelism = tc.completions, tc.parallelism
			Strategy{}.PrepareForCreate(context.Background(), j)
			if (j.Spec.Completions == nil) != (tc.wantCompletions == nil) || (tc.wantCompletions != nil && *j.Spec.Completions != *tc.wantCompletions) ||
				*j.Spec.Parallelism != tc.wantParallelism || *j.Spec.BackoffLimit != tc.wantBackoffs || *j.Spec.CompletionMode != batchv1.NonIndexedCompletion {
				t.Fatalf("defaults: completions %v parallelism %d backoffLimit %d", j.Spec.Completions, *j.Spec.Parallelism, *j.Spec.BackoffLimit)
			}
			if j.Spec.Selector.MatchLabels[ControllerUIDLabel] != "uid-1" || j.Spec.Template.Labels[LegacyJobNameLabel] != "pi" || j.Labels[JobNameLabel] != "pi" {
				t.Fatalf("selector %v template labels %v labels %v", j.Spec.Selector, j.Spec.Template.Labels, j.Labels)
			}
			if errs := (Strategy{}).Validate(context.Background(), j); len(errs) != 0 {
				t.Fatalf("a defaulted job is invalid: %v", errs)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*batchv1.Job)
		wantErr string
	}{
		{name: "restartPolicy Always", mutate: func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways },
			wantErr: `spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"`},
		{name: "activeDeadlineSeconds must not be negative", mutate: func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(-1)) },
			wantErr: "spec.activeDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0"},
		{name: "Indexed", mutate: indexed(3, nil)},
		{name: "Indexed needs completions", mutate: func(j *batchv1.Job) {
			j.Spec.CompletionMode, j.Spec.Parallelism = ptr.To(batchv1.IndexedCompletion), ptr.To(int32(2))
		}, wantErr: "spec.completions: Required value: when completion mode is Indexed"},
		{name: "Indexed parallelism is capped", mutate: indexed(3, func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To(int32(100_001)) }),
			wantErr: "spec.parallelism: Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed"},
		{name: "Indexed pod hostnames must be DNS labels", mutate: indexed(3, func(j *batchv1.Job) { j.Name = "a.b" }),
			wantErr: "metadata.name: Invalid value: \"a.b\": will not able to create pod with invalid DNS label: a.b-2"},
		{name: "an unknown completion mode", mutate: func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.CompletionMode("Sometimes")) },
			wantErr: `spec.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"`},
		{name: "backoffLimitPerIndex and maxFailedIndexes", mutate: indexed(3, func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To(int32(1)), ptr.To(int32(2))
		})},
		{name: "backoffLimitPerIndex needs Indexed", mutate: func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To(int32(1)) },
			wantErr: "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"},
		{name: "maxFailedIndexes needs backoffLimitPerIndex", mutate: indexed(3, func(j *batchv1.Job) { j.Spec.MaxFailedIndexes = ptr.To(int32(1)) }),
			wantErr: "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"},
		{name: "maxFailedIndexes at most completions", mutate: indexed(3, func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To(int32(1)), ptr.To(int32(4))
		}), wantErr: "spec.maxFailedIndexes: Invalid value: 4: must be less than or equal to completions"},
		{name: "pod failure policy", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("c"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 42}}},
			batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}})},
		{name: "pod failure policy needs restartPolicy Never", mutate: func(j *batchv1.Job) {
			withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionCount,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}})(j)
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, wantErr: `spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`},
		{name: "an unknown action", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: "Retry",
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}),
			wantErr: `spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", "Ignore"`},
		{name: "FailIndex needs backoffLimitPerIndex", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailIndex,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}),
			wantErr: `spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set`},
		{name: "exit code 0 with In", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{0, 1}}}),
			wantErr: "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator"},
		{name: "exit codes out of order", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{5, 2}}}),
			wantErr: "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [5,2]: must be ordered"},
		{name: "duplicate exit codes", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2, 2}}}),
			wantErr: "spec.podFailurePolicy.rules[0].onExitCodes.values[1]: Duplicate value: 2"},
		{name: "no exit codes", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn}}),
			wantErr: "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: null: at least one value is required"},
		{name: "an unknown container", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("x"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}}),
			wantErr: `spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "x": must be one of the container or initContainer names in the pod template`},
		{name: "an unknown operator", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: "Is", Values: []int32{1}}}),
			wantErr: `spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "Is": supported values: "In", "NotIn"`},
		{name: "a rule needs a requirement", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore}),
			wantErr: "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"},
		{name: "a rule has one requirement", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
			OnExitCodes:     &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}},
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}),
			wantErr: "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"},
		{name: "at most 20 rules", mutate: withPolicy(make([]batchv1.PodFailurePolicyRule, 21)...),
			wantErr: "spec.podFailurePolicy.rules: Too many: 21: must have at most 20 items"},
		{name: "a bad pod condition status", mutate: withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: "Maybe"}}}),
			wantErr: `spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", "Unknown"`},
		{name: "podReplacementPolicy must be Failed with a pod failure policy", mutate: func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
			withPolicy(batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}})(j)
		}, wantErr: `spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"`},
		{name: "an unknown podReplacementPolicy", mutate: func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.PodReplacementPolicy("Never")) },
			wantErr: `spec.podReplacementPolicy: Unsupported value: "Never": supported values: "Failed", "TerminatingOrFailed"`},
		{name: "success policy", mutate: indexed(5, func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0,2-4"), SucceededCount: ptr.To(int32(2))}}}
		})},
		{name: "success policy needs Indexed", mutate: func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(int32(1))}}}
		}, wantErr: "spec.successPolicy: Invalid value: ",
		},
		{name: "success policy indexes below completions", mutate: indexed(5, func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1-5")}}}
		}), wantErr: `spec.successPolicy.rules[0].succeededIndexes: Invalid value: "1-5": error parsing succeededIndexes: too large index: "5"`},
		{name: "success policy count at most its indexes", mutate: indexed(5, func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1,3"), SucceededCount: ptr.To(int32(3))}}}
		}), wantErr: "spec.successPolicy.rules[0].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"},
		{name: "success policy rules name something", mutate: indexed(5, func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{}}}
		}), wantErr: "spec.successPolicy.rules[0]: Required value: at least one of succeededCount or succeededIndexes must be specified"},
		{name: "managedBy another controller", mutate: func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/batch") }},
		{name: "managedBy must be a domain-prefixed path", mutate: func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("batch") },
			wantErr: `spec.managedBy: Invalid value: "batch": must be a domain-prefixed path`},
		{name: "a hand-written selector needs manualSelector", mutate: func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{ControllerUIDLabel: "other"}
		}, wantErr: "must be 'uid-1'"},
		{name: "manualSelector takes the selector as given", mutate: func(j *batchv1.Job) {
			j.Spec.ManualSelector = ptr.To(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "pi"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := valid()
			tc.mutate(j)
			Strategy{}.PrepareForCreate(context.Background(), j)
			errs := Strategy{}.Validate(context.Background(), j)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestStatusCannotUnfinishAJob(t *testing.T) {
	old := valid()
	Strategy{}.PrepareForCreate(context.Background(), old)
	old.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	j := old.DeepCopy()
	j.Status.Conditions = nil
	if errs := (StatusStrategy{}).ValidateUpdate(context.Background(), j, old); len(errs) == 0 {
		t.Error("removing Complete=True was accepted")
	}
}

func TestTableRow(t *testing.T) {
	start := metav1.NewTime(time.Now().Add(-90 * time.Second))
	end := metav1.NewTime(start.Add(30 * time.Second))
	for _, tc := range []struct {
		name                             string
		job                              func() *batchv1.Job
		wantStatus, wantCompl, wantDurat string
	}{
		{name: "running", job: func() *batchv1.Job {
			j := valid()
			j.Spec.Completions = ptr.To(int32(3))
			j.Status.Succeeded = 1
			return j
		}, wantStatus: "Running", wantCompl: "1/3"},
		{name: "complete with duration", job: func() *batchv1.Job {
			j := valid()
			j.Spec.Completions = ptr.To(int32(1))
			j.Status = batchv1.JobStatus{Succeeded: 1, StartTime: &start, CompletionTime: &end,
				Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
			return j
		}, wantStatus: "Complete", wantCompl: "1/1", wantDurat: "30s"},
		{name: "work queue", job: func() *batchv1.Job {
			j := valid()
			j.Spec.Parallelism = ptr.To(int32(4))
			return j
		}, wantStatus: "Running", wantCompl: "0/1 of 4"},
		{name: "failed", job: func() *batchv1.Job {
			j := valid()
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
			return j
		}, wantStatus: "Failed", wantCompl: "0/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := Strategy{}.TableRow(tc.job())
			if row[1] != tc.wantStatus || row[2] != tc.wantCompl || row[3] != tc.wantDurat {
				t.Errorf("row %v, want status %q completions %q duration %q", row, tc.wantStatus, tc.wantCompl, tc.wantDurat)
			}
		})
	}
}
