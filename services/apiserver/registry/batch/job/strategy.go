// Package job is the batch/v1 jobs resource: its strategy (defaulting, selector
// generation, validation, generation, kubectl's columns) and jobs/status. Mirrors
// k8s.io/kubernetes/pkg/registry/batch/job.
package job

import (
	"context"
	"fmt"
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
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
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
// unset (parallelism 1 when only it is), backoffLimit 6, completionMode NonIndexed,
// suspend false, podReplacementPolicy TerminatingOrFailed, and the pod template's
// defaults. Mirrors SetDefaults_Job.
func SetDefaults(job *batchv1.Job) {
	spec := &job.Spec
	if spec.Completions == nil && spec.Parallelism == nil {
		spec.Completions = ptr.To(int32(1))
	}
	if spec.Parallelism == nil {
		spec.Parallelism = ptr.To(int32(1))
	}
	if spec.BackoffLimit == nil {
		spec.BackoffLimit = ptr.To(int32(6))
	}
	if spec.CompletionMode == nil {
		spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	if spec.Suspend == nil {
		spec.Suspend = ptr.To(false)
	}
	if spec.PodReplacementPolicy == nil {
		spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
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

// Validate checks a new Job. Mirrors ValidateJob.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	job := obj.(*batchv1.Job)
	allErrs := apivalidation.ValidateObjectMeta(&job.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateGeneratedSelector(job)...)
	return append(allErrs, validateSpec(&job.Spec, field.NewPath("spec"))...)
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

var supportedJobRestartPolicies = []string{string(corev1.RestartPolicyOnFailure), string(corev1.RestartPolicyNever)}

// validateSpec mirrors ValidateJobSpec for the fields skiff's job controller honours.
func validateSpec(spec *batchv1.JobSpec, specPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Parallelism != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.Parallelism), specPath.Child("parallelism"))...)
	}
	if spec.Completions != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.Completions), specPath.Child("completions"))...)
	}
	if spec.BackoffLimit != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.BackoffLimit), specPath.Child("backoffLimit"))...)
	}
	if spec.TTLSecondsAfterFinished != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.TTLSecondsAfterFinished), specPath.Child("ttlSecondsAfterFinished"))...)
	}
	if d := spec.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		allErrs = append(allErrs, field.Invalid(specPath.Child("activeDeadlineSeconds"), *d, "must be greater than 0"))
	}
	if m := spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion {
		// The job controller counts completions, not indexes: Indexed Jobs are refused
		// rather than run as if they were NonIndexed.
		allErrs = append(allErrs, field.NotSupported(specPath.Child("completionMode"), *m, []string{string(batchv1.NonIndexedCompletion)}))
	}
	if spec.PodFailurePolicy != nil {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("podFailurePolicy"), "not supported by skiff's job controller"))
	}
	if spec.SuccessPolicy != nil {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("successPolicy"), "not supported by skiff's job controller"))
	}
	if spec.BackoffLimitPerIndex != nil || spec.MaxFailedIndexes != nil {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("backoffLimitPerIndex"), "requires completionMode Indexed, which skiff does not support"))
	}
	if spec.ManagedBy != nil && *spec.ManagedBy != batchv1.JobControllerName {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("managedBy"), *spec.ManagedBy, []string{batchv1.JobControllerName}))
	}
	allErrs = append(allErrs, workloadvalidation.ValidateSelectorAndTemplate(spec.Selector, &spec.Template, specPath)...)
	return append(allErrs, validateRestartPolicy(spec, specPath)...)
}

func validateRestartPolicy(spec *batchv1.JobSpec, specPath *field.Path) field.ErrorList {
	rp := spec.Template.Spec.RestartPolicy
	if rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
		return field.ErrorList{field.NotSupported(specPath.Child("template", "spec", "restartPolicy"), rp, supportedJobRestartPolicies)}
	}
	return nil
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

// ValidateUpdate checks an update: a valid Job whose selector, template, completions and
// completion mode did not change. Mirrors ValidateJobUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newJob, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newJob.ObjectMeta, &oldJob.ObjectMeta, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	allErrs = append(allErrs, validateSpec(&newJob.Spec, specPath)...)
	allErrs = append(allErrs, workloadvalidation.ValidateSelectorUnchanged(newJob.Spec.Selector, oldJob.Spec.Selector, specPath)...)
	immutable := []struct {
		name     string
		new, old interface{}
	}{
		{"template", newJob.Spec.Template, oldJob.Spec.Template},
		{"completions", newJob.Spec.Completions, oldJob.Spec.Completions},
		{"completionMode", newJob.Spec.CompletionMode, oldJob.Spec.CompletionMode},
		{"manualSelector", newJob.Spec.ManualSelector, oldJob.Spec.ManualSelector},
	}
	for _, f := range immutable {
		if !apiequality.Semantic.DeepEqual(f.new, f.old) {
			allErrs = append(allErrs, field.Invalid(specPath.Child(f.name), f.new, "field is immutable"))
		}
	}
	return allErrs
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

// ValidateUpdate checks the status counts, and that a finished Job stays finished.
// Mirrors ValidateJobUpdateStatus.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newJob, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newJob.ObjectMeta, &oldJob.ObjectMeta, field.NewPath("metadata"))
	st, p := newJob.Status, field.NewPath("status")
	for name, v := range map[string]int32{"active": st.Active, "succeeded": st.Succeeded, "failed": st.Failed} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(v), p.Child(name))...)
	}
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if HasCondition(oldJob, t) && !HasCondition(newJob, t) {
			allErrs = append(allErrs, field.Invalid(p.Child("conditions"), newJob.Status.Conditions, fmt.Sprintf("cannot remove the %s=True condition of a finished job", t)))
		}
	}
	return allErrs
}
