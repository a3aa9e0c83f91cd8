// Package job is the batch/v1 jobs resource: its strategy (defaulting, selector
// generation, validation, generation, kubectl's columns) and jobs/status. Mirrors
// k8s.io/kubernetes/pkg/registry/batch/job.
package job

import (
	"context"
	"fmt"
	"math"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
)

// The labels the apiserver puts on a Job's pod template when it generates the selector
// (batch/v1's ControllerUidLabel, JobNameLabel and their legacy unprefixed forms).
const (
	ControllerUIDLabel       = "batch.kubernetes.io/controller-uid"
	LegacyControllerUIDLabel = "controller-uid"
	JobNameLabel             = "batch.kubernetes.io/job-name"
	LegacyJobNameLabel       = "job-name"
)

// Strategy is the jobs strategy. Mirrors jobStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of jobs/status: only status changes. Mirrors
// jobStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what batch/v1 defaults: completions and parallelism 1 when both are
// unset (parallelism 1 when only it is), backoffLimit 6 (2^31-1 with
// backoffLimitPerIndex), completionMode NonIndexed, suspend false, status True for
// onPodConditions patterns without one, podReplacementPolicy (Failed with a pod
// failure policy, else TerminatingOrFailed), manualSelector false, and the pod
// template's defaults. Mirrors SetDefaults_Job.
func SetDefaults(job *batchv1.Job) {
	spec := &job.Spec
	if spec.Completions == nil && spec.Parallelism == nil {
		spec.Completions = ptr.To(int32(1))
	}
	if spec.Parallelism == nil {
		spec.Parallelism = ptr.To(int32(1))
	}
	if spec.BackoffLimit == nil {
		if spec.BackoffLimitPerIndex != nil {
			spec.BackoffLimit = ptr.To(int32(math.MaxInt32))
		} else {
			spec.BackoffLimit = ptr.To(int32(6))
		}
	}
	if spec.CompletionMode == nil {
		spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	if spec.Suspend == nil {
		spec.Suspend = ptr.To(false)
	}
	if spec.PodFailurePolicy != nil {
		for i := range spec.PodFailurePolicy.Rules {
			for j := range spec.PodFailurePolicy.Rules[i].OnPodConditions {
				if c := &spec.PodFailurePolicy.Rules[i].OnPodConditions[j]; c.Status == "" {
					c.Status = corev1.ConditionTrue
				}
			}
		}
	}
	if spec.PodReplacementPolicy == nil {
		if spec.PodFailurePolicy != nil {
			spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		} else {
			spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}
	}
	if spec.ManualSelector == nil {
		spec.ManualSelector = ptr.To(false)
	}
	defaults.SetPodSpecDefaults(&spec.Template.Spec)
}

// PrepareForCreate clears status, sets generation 1, fills defaults and, unless
// spec.manualSelector is true, generates the selector from the Job's uid: the template
// gets the controller-uid and job-name labels (prefixed and legacy) and the selector
// matches batch.kubernetes.io/controller-uid. A Job without labels takes its template's.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	job := obj.(*batchv1.Job)
	job.Status = batchv1.JobStatus{}
	job.Generation = 1
	SetDefaults(job)
	if !ptr.Deref(job.Spec.ManualSelector, false) {
		generateSelector(job)
	}
	if len(job.Labels) == 0 && len(job.Spec.Template.Labels) > 0 {
		job.Labels = make(map[string]string, len(job.Spec.Template.Labels))
		for k, v := range job.Spec.Template.Labels {
			job.Labels[k] = v
		}
	}
}

// generateSelector mirrors kube's generateSelector: labels a user already set keep
// their value (and then fail validation if they disagree).
func generateSelector(job *batchv1.Job) {
	if job.Spec.Template.Labels == nil {
		job.Spec.Template.Labels = map[string]string{}
	}
	uid := string(job.UID)
	for k, v := range map[string]string{ControllerUIDLabel: uid, LegacyControllerUIDLabel: uid, JobNameLabel: job.Name, LegacyJobNameLabel: job.Name} {
		if _, ok := job.Spec.Template.Labels[k]; !ok {
			job.Spec.Template.Labels[k] = v
		}
	}
	if job.Spec.Selector == nil {
		job.Spec.Selector = &metav1.LabelSelector{}
	}
	if job.Spec.Selector.MatchLabels == nil {
		job.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, ok := job.Spec.Selector.MatchLabels[ControllerUIDLabel]; !ok {
		job.Spec.Selector.MatchLabels[ControllerUIDLabel] = uid
	}
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec
// changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newJob, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	newJob.Status = oldJob.Status
	SetDefaults(newJob)
	if !apiequality.Semantic.DeepEqual(newJob.Spec, oldJob.Spec) {
		newJob.Generation = oldJob.Generation + 1
	}
}

// Validate checks a new Job: its metadata, generated selector and spec; an Indexed
// Job's last pod hostname <name>-<completions-1> must be a DNS label. Mirrors
// ValidateJob.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	job := obj.(*batchv1.Job)
	return validateJob(job)
}

func validateJob(job *batchv1.Job) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&job.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateGeneratedSelector(job)...)
	allErrs = append(allErrs, validateSpec(&job.Spec, field.NewPath("spec"))...)
	return append(allErrs, validateIndexedHostname(job)...)
}

// validateGeneratedSelector checks that a Job without manualSelector carries the
// selector and template labels PrepareForCreate generated. Mirrors
// ValidateGeneratedSelector.
func validateGeneratedSelector(job *batchv1.Job) field.ErrorList {
	if ptr.Deref(job.Spec.ManualSelector, false) {
		return nil
	}
	var allErrs field.ErrorList
	uid := string(job.UID)
	tmplLabels := field.NewPath("spec", "template", "metadata", "labels")
	for _, k := range []string{ControllerUIDLabel, LegacyControllerUIDLabel} {
		if v, ok := job.Spec.Template.Labels[k]; ok && v != uid {
			allErrs = append(allErrs, field.Invalid(tmplLabels.Key(k), v, "must be '"+uid+"'"))
		}
	}
	if sel := job.Spec.Selector; sel == nil || sel.MatchLabels[ControllerUIDLabel] != uid {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "selector"), sel, "`selector` not auto-generated"))
	}
	return allErrs
}

// ValidateJobTemplateSpec checks a CronJob's spec.jobTemplate.spec at specPath: a Job
// spec without a selector (each Job's is generated when it is created) and without
// manualSelector. Mirrors ValidateJobTemplateSpec.
func ValidateJobTemplateSpec(spec *batchv1.JobSpec, specPath *field.Path) field.ErrorList {
	// validateSpec wants a selector that matches the template: check with the one each
	// Job made from the template will get.
	withSelector := spec.DeepCopy()
	withSelector.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{ControllerUIDLabel: "generated"}}
	if withSelector.Template.Labels == nil {
		withSelector.Template.Labels = map[string]string{}
	}
	withSelector.Template.Labels[ControllerUIDLabel] = "generated"
	allErrs := validateSpec(withSelector, specPath)
	if spec.Selector != nil {
		allErrs = append(allErrs, field.Invalid(specPath.Child("selector"), spec.Selector, "`selector` will be auto-generated"))
	}
	if spec.ManualSelector != nil && *spec.ManualSelector {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("manualSelector"), spec.ManualSelector, []string{"nil", "false"}))
	}
	return allErrs
}

// ValidateUpdate checks an update: a valid Job whose immutable fields did not change
// (see validateSpecUpdate). Mirrors ValidateJobUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newJob, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	allErrs := validateJob(newJob)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&newJob.ObjectMeta, &oldJob.ObjectMeta, field.NewPath("metadata"))...)
	return append(allErrs, validateSpecUpdate(newJob, oldJob, field.NewPath("spec"))...)
}

// GetAttrs returns labels and the selectable fields: metadata and status.successful.
// Mirrors JobToSelectableFields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return nil, nil, fmt.Errorf("not a job: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&job.ObjectMeta, true)
	f["status.successful"] = fmt.Sprint(job.Status.Succeeded)
	return labels.Set(job.Labels), f, nil
}

// TableColumns are NAME STATUS COMPLETIONS DURATION AGE, and wide CONTAINERS IMAGES
// SELECTOR. Mirrors printJob.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Status", Type: "string", Description: "Status of the job."},
		{Name: "Completions", Type: "string", Description: "The desired number of successfully finished pods the job should be run with."},
		{Name: "Duration", Type: "string", Description: "Time required to complete the job."},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that should match the pod count."},
	}
}

// TableRow prints one Job: COMPLETIONS is succeeded/completions, DURATION runs from
// startTime to completionTime (or now), STATUS is Complete, Failed, Terminating,
// Suspended, FailureTarget or Running.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	job := obj.(*batchv1.Job)
	var completions string
	if job.Spec.Completions != nil {
		completions = fmt.Sprintf("%d/%d", job.Status.Succeeded, *job.Spec.Completions)
	} else if p := ptr.Deref(job.Spec.Parallelism, 0); p > 1 {
		completions = fmt.Sprintf("%d/1 of %d", job.Status.Succeeded, p)
	} else {
		completions = fmt.Sprintf("%d/1", job.Status.Succeeded)
	}
	var jobDuration string
	switch {
	case job.Status.StartTime == nil:
	case job.Status.CompletionTime == nil:
		jobDuration = duration.HumanDuration(time.Since(job.Status.StartTime.Time))
	default:
		jobDuration = duration.HumanDuration(job.Status.CompletionTime.Sub(job.Status.StartTime.Time))
	}
	status := "Running"
	switch {
	case HasCondition(job, batchv1.JobComplete):
		status = "Complete"
	case HasCondition(job, batchv1.JobFailed):
		status = "Failed"
	case job.DeletionTimestamp != nil:
		status = "Terminating"
	case HasCondition(job, batchv1.JobSuspended):
		status = "Suspended"
	case HasCondition(job, batchv1.JobFailureTarget):
		status = "FailureTarget"
	}
	names, images := pod.ContainerCells(job.Spec.Template.Spec.Containers)
	return []interface{}{
		job.Name, status, completions, jobDuration, registry.TranslateTimestampSince(job.CreationTimestamp),
		names, images, metav1.FormatLabelSelector(job.Spec.Selector),
	}
}

// HasCondition reports whether the Job has condition t with status True.
func HasCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// PrepareForUpdate keeps the stored spec. Mirrors jobStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*batchv1.Job).Spec = old.(*batchv1.Job).Spec
}

// ValidateUpdate checks a status write (see validateStatusUpdate). Mirrors
// ValidateJobUpdateStatus.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newJob, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newJob.ObjectMeta, &oldJob.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateStatusUpdate(newJob, oldJob)...)
}
