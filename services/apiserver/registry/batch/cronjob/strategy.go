// Package cronjob is the batch/v1 cronjobs resource: its strategy (defaulting,
// validation of the schedule and time zone, generation, kubectl's columns) and
// cronjobs/status. Mirrors k8s.io/kubernetes/pkg/registry/batch/cronjob.
package cronjob

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	"skiff.dev/services/apiserver/registry/batch/job"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
)

// maxNameLength leaves room for the "-<minutes>" the controller appends to name Jobs.
const maxNameLength = 52

// Strategy is the cronjobs strategy. Mirrors cronJobStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of cronjobs/status: only status changes.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what batch/v1 defaults: concurrencyPolicy Allow, suspend false,
// successfulJobsHistoryLimit 3, failedJobsHistoryLimit 1, and the job template's pod
// defaults. Mirrors SetDefaults_CronJob.
func SetDefaults(cj *batchv1.CronJob) {
	if cj.Spec.ConcurrencyPolicy == "" {
		cj.Spec.ConcurrencyPolicy = batchv1.AllowConcurrent
	}
	if cj.Spec.Suspend == nil {
		cj.Spec.Suspend = ptr.To(false)
	}
	if cj.Spec.SuccessfulJobsHistoryLimit == nil {
		cj.Spec.SuccessfulJobsHistoryLimit = ptr.To(int32(3))
	}
	if cj.Spec.FailedJobsHistoryLimit == nil {
		cj.Spec.FailedJobsHistoryLimit = ptr.To(int32(1))
	}
	defaults.SetPodSpecDefaults(&cj.Spec.JobTemplate.Spec.Template.Spec)
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	cj := obj.(*batchv1.CronJob)
	cj.Status = batchv1.CronJobStatus{}
	cj.Generation = 1
	SetDefaults(cj)
}

// PrepareForUpdate keeps the stored status and bumps the generation on a spec change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newCJ, oldCJ := obj.(*batchv1.CronJob), old.(*batchv1.CronJob)
	newCJ.Status = oldCJ.Status
	SetDefaults(newCJ)
	if !apiequality.Semantic.DeepEqual(newCJ.Spec, oldCJ.Spec) {
		newCJ.Generation = oldCJ.Generation + 1
	}
}

// Validate checks a new CronJob. Mirrors ValidateCronJobCreate.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validate(obj.(*batchv1.CronJob))
}

// ValidateUpdate checks an update like a create, plus the metadata rules.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newCJ, oldCJ := obj.(*batchv1.CronJob), old.(*batchv1.CronJob)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newCJ.ObjectMeta, &oldCJ.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validate(newCJ)...)
}

func validate(cj *batchv1.CronJob) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&cj.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if len(cj.Name) > maxNameLength {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "name"), cj.Name, fmt.Sprintf("must be no more than %d characters", maxNameLength)))
	}
	specPath := field.NewPath("spec")
	allErrs = append(allErrs, ValidateSchedule(cj.Spec.Schedule, cj.Spec.TimeZone, specPath)...)
	switch cj.Spec.ConcurrencyPolicy {
	case batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent:
	default:
		allErrs = append(allErrs, field.NotSupported(specPath.Child("concurrencyPolicy"), cj.Spec.ConcurrencyPolicy,
			[]string{string(batchv1.AllowConcurrent), string(batchv1.ForbidConcurrent), string(batchv1.ReplaceConcurrent)}))
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(*d, specPath.Child("startingDeadlineSeconds"))...)
	}
	for name, v := range map[string]*int32{"successfulJobsHistoryLimit": cj.Spec.SuccessfulJobsHistoryLimit, "failedJobsHistoryLimit": cj.Spec.FailedJobsHistoryLimit} {
		if v != nil {
			allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*v), specPath.Child(name))...)
		}
	}
	tmpl := specPath.Child("jobTemplate")
	allErrs = append(allErrs, metav1validation.ValidateLabels(cj.Spec.JobTemplate.Labels, tmpl.Child("metadata", "labels"))...)
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(cj.Spec.JobTemplate.Annotations, tmpl.Child("metadata", "annotations"))...)
	return append(allErrs, job.ValidateJobTemplateSpec(&cj.Spec.JobTemplate.Spec, tmpl.Child("spec"))...)
}

// ValidateSchedule checks a standard five-field cron schedule (or a descriptor such as
// @hourly) and the IANA time zone; a time zone inside the schedule (TZ= or CRON_TZ=) is
// refused in favour of spec.timeZone, as kube does.
func ValidateSchedule(schedule string, timeZone *string, specPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if strings.Contains(schedule, "TZ") {
		allErrs = append(allErrs, field.Invalid(specPath.Child("schedule"), schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
	} else if _, err := cron.ParseStandard(schedule); err != nil {
		allErrs = append(allErrs, field.Invalid(specPath.Child("schedule"), schedule, err.Error()))
	}
	if timeZone != nil {
		if _, err := time.LoadLocation(*timeZone); err != nil || *timeZone == "" || strings.EqualFold(*timeZone, "local") {
			allErrs = append(allErrs, field.Invalid(specPath.Child("timeZone"), *timeZone, "unknown time zone"))
		}
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	cj, ok := obj.(*batchv1.CronJob)
	if !ok {
		return nil, nil, fmt.Errorf("not a cronjob: %T", obj)
	}
	return labels.Set(cj.Labels), registry.ObjectMetaFieldsSet(&cj.ObjectMeta, true), nil
}

// TableColumns are NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE, and wide
// CONTAINERS IMAGES SELECTOR. Mirrors printCronJob.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Schedule", Type: "string", Description: "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."},
		{Name: "Timezone", Type: "string", Description: "The time zone name for the given schedule."},
		{Name: "Suspend", Type: "boolean", Description: "This flag tells the controller to suspend subsequent executions."},
		{Name: "Active", Type: "integer", Description: "A list of pointers to currently running jobs."},
		{Name: "Last Schedule", Type: "string", Description: "Information when was the last time the job was successfully scheduled."},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that should match the pod count."},
	}
}

// TableRow prints one CronJob.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	cj := obj.(*batchv1.CronJob)
	last, tz := "<none>", "<none>"
	if cj.Status.LastScheduleTime != nil {
		last = registry.TranslateTimestampSince(*cj.Status.LastScheduleTime)
	}
	if cj.Spec.TimeZone != nil {
		tz = *cj.Spec.TimeZone
	}
	suspend := "<unset>" // printers' printBoolPtr
	switch {
	case cj.Spec.Suspend == nil:
	case *cj.Spec.Suspend:
		suspend = "True"
	default:
		suspend = "False"
	}
	names, images := pod.ContainerCells(cj.Spec.JobTemplate.Spec.Template.Spec.Containers)
	return []interface{}{
		cj.Name, cj.Spec.Schedule, tz, suspend, int64(len(cj.Status.Active)), last,
		registry.TranslateTimestampSince(cj.CreationTimestamp),
		names, images, metav1.FormatLabelSelector(cj.Spec.JobTemplate.Spec.Selector),
	}
}

// PrepareForUpdate keeps the stored spec. Mirrors cronJobStatusStrategy.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*batchv1.CronJob).Spec = old.(*batchv1.CronJob).Spec
}

// ValidateUpdate checks only the metadata rules.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(&obj.(*batchv1.CronJob).ObjectMeta, &old.(*batchv1.CronJob).ObjectMeta, field.NewPath("metadata"))
}
