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
			wantErr: `spec.template.spec.restartPolicy: Unsupported value: "Always"`},
		{name: "Indexed completion mode is refused", mutate: func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) },
			wantErr: "spec.completionMode: Unsupported value"},
		{name: "podFailurePolicy is refused", mutate: func(j *batchv1.Job) { j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{} },
			wantErr: "spec.podFailurePolicy: Forbidden"},
		{name: "activeDeadlineSeconds must be positive", mutate: func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(0)) },
			wantErr: "spec.activeDeadlineSeconds"},
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
