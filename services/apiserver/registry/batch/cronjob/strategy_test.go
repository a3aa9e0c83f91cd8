package cronjob

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func valid() *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: "default"},
		Spec: batchv1.CronJobSpec{
			Schedule: "*/5 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
			}}}},
		},
	}
}

func TestDefaultsAndValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*batchv1.CronJob)
		wantErr string
	}{
		{name: "valid", mutate: func(*batchv1.CronJob) {}},
		{name: "descriptor schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "@hourly" }},
		{name: "time zone", mutate: func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Europe/Paris") }},
		{name: "bad schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "every minute" }, wantErr: "spec.schedule: Invalid value"},
		{name: "time zone in the schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "CRON_TZ=UTC * * * * *" },
			wantErr: "use timeZone field instead"},
		{name: "unknown time zone", mutate: func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Mars/Olympus") }, wantErr: "unknown time zone"},
		{name: "name too long", mutate: func(cj *batchv1.CronJob) { cj.Name = strings.Repeat("a", 53) }, wantErr: "must be no more than 52 characters"},
		{name: "selector in the job template", mutate: func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, wantErr: "`selector` will be auto-generated"},
		{name: "restartPolicy Always in the job template", mutate: func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, wantErr: "spec.jobTemplate.spec.template.spec.restartPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := valid()
			tc.mutate(cj)
			Strategy{}.PrepareForCreate(context.Background(), cj)
			if cj.Spec.ConcurrencyPolicy != batchv1.AllowConcurrent || *cj.Spec.SuccessfulJobsHistoryLimit != 3 || *cj.Spec.FailedJobsHistoryLimit != 1 || *cj.Spec.Suspend {
				t.Fatalf("defaults: %+v", cj.Spec)
			}
			errs := Strategy{}.Validate(context.Background(), cj)
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

func TestTableRow(t *testing.T) {
	cj := valid()
	Strategy{}.PrepareForCreate(context.Background(), cj)
	row := Strategy{}.TableRow(cj)
	if row[0] != "tick" || row[1] != "*/5 * * * *" || row[2] != "<none>" || row[3] != "False" || row[4] != int64(0) || row[5] != "<none>" {
		t.Errorf("row %v", row)
	}
	if len(row) != len(Strategy{}.TableColumns()) {
		t.Errorf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
	}
}
