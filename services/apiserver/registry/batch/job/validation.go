package job

import (
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
)

// Limits of an Job's spec. Mirror the constants of
// k8s.io/kubernetes/pkg/apis/batch/validation.
const (
	// MaxParallelismForIndexedJob caps parallelism of an Indexed Job, so that
	// status.completedIndexes stays short.
	MaxParallelismForIndexedJob = 100_000
	// MaxFailedIndexesForIndexedJob caps maxFailedIndexes.
	MaxFailedIndexesForIndexedJob = 100_000
	// CompletionsSoftLimit is the completions above which a Job with
	// backoffLimitPerIndex must set maxFailedIndexes, and parallelism and
	// maxFailedIndexes are capped at 10^4.
	CompletionsSoftLimit                    = 100_000
	parallelismLimitForHighCompletions      = 10_000
	maxFailedIndexesLimitForHighCompletions = 10_000

	// MaxPodFailurePolicyRules is the most rules a pod failure policy has.
	MaxPodFailurePolicyRules = 20
	// MaxPodFailurePolicyOnExitCodesValues is the most values of one onExitCodes.
	MaxPodFailurePolicyOnExitCodesValues = 255
	// MaxPodFailurePolicyOnPodConditionsPatterns is the most onPodConditions patterns of one rule.
	MaxPodFailurePolicyOnPodConditionsPatterns = 20
	// MaxManagedByLength is the longest spec.managedBy.
	MaxManagedByLength = 63
	// MaxSuccessPolicySucceededIndexesLength is the longest succeededIndexes of a success policy rule.
	MaxSuccessPolicySucceededIndexesLength = 64 * 1024
	// MaxSuccessPolicyRules is the most rules a success policy has.
	MaxSuccessPolicyRules = 20
)

var (
	supportedPodFailurePolicyActions = sets.New(
		batchv1.PodFailurePolicyActionCount,
		batchv1.PodFailurePolicyActionFailIndex,
		batchv1.PodFailurePolicyActionFailJob,
		batchv1.PodFailurePolicyActionIgnore)
	supportedPodFailurePolicyOnExitCodesOperator = sets.New(
		batchv1.PodFailurePolicyOnExitCodesOpIn,
		batchv1.PodFailurePolicyOnExitCodesOpNotIn)
	supportedPodFailurePolicyOnPodConditionsStatus = sets.New(
		corev1.ConditionFalse,
		corev1.ConditionTrue,
		corev1.ConditionUnknown)
	supportedPodReplacementPolicy = sets.New(
		batchv1.Failed,
		batchv1.TerminatingOrFailed)
)

// validateSpec checks a Job's spec at specPath, the selector (required, matching the
// template's labels) included. Mirrors ValidateJobSpec.
func validateSpec(spec *batchv1.JobSpec, specPath *field.Path) field.ErrorList {
	allErrs := validateJobSpecFields(spec, specPath)
	return append(allErrs, workloadvalidation.ValidateSelectorAndTemplate(spec.Selector, &spec.Template, specPath)...)
}

// validateJobSpecFields checks everything of a Job spec but the selector: counts,
// completion mode and its limits, backoffLimitPerIndex and maxFailedIndexes,
// managedBy, the pod failure, success and pod replacement policies, and the restart
// policy. Messages are kube's. Mirrors validateJobSpec (the template itself is checked
// by the caller).
func validateJobSpecFields(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	nonnegative := func(v *int32, name string) {
		if v != nil {
			allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*v), fldPath.Child(name))...)
		}
	}
	nonnegative(spec.Parallelism, "parallelism")
	nonnegative(spec.Completions, "completions")
	if spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(*spec.ActiveDeadlineSeconds, fldPath.Child("activeDeadlineSeconds"))...)
	}
	nonnegative(spec.BackoffLimit, "backoffLimit")
	nonnegative(spec.TTLSecondsAfterFinished, "ttlSecondsAfterFinished")
	nonnegative(spec.BackoffLimitPerIndex, "backoffLimitPerIndex")
	if spec.MaxFailedIndexes != nil {
		nonnegative(spec.MaxFailedIndexes, "maxFailedIndexes")
		if spec.BackoffLimitPerIndex == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
	}
	if spec.ManagedBy != nil {
		allErrs = append(allErrs, utilvalidation.IsDomainPrefixedPath(fldPath.Child("managedBy"), *spec.ManagedBy)...)
		if len(*spec.ManagedBy) > MaxManagedByLength {
			allErrs = append(allErrs, field.TooLong(fldPath.Child("managedBy"), "", MaxManagedByLength))
		}
	}
	if spec.CompletionMode != nil {
		allErrs = append(allErrs, validateCompletionMode(spec, fldPath)...)
	}
	if !isIndexed(spec) {
		if spec.BackoffLimitPerIndex != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("backoffLimitPerIndex"), *spec.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if spec.MaxFailedIndexes != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("maxFailedIndexes"), *spec.MaxFailedIndexes, "requires indexed completion mode"))
		}
	}
	if spec.PodFailurePolicy != nil {
		allErrs = append(allErrs, validatePodFailurePolicy(spec, fldPath.Child("podFailurePolicy"))...)
	}
	if spec.SuccessPolicy != nil {
		if !isIndexed(spec) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("successPolicy"), *spec.SuccessPolicy, "requires indexed completion mode"))
		} else {
			allErrs = append(allErrs, validateSuccessPolicy(spec, fldPath.Child("successPolicy"))...)
		}
	}
	allErrs = append(allErrs, validatePodReplacementPolicy(spec, fldPath.Child("podReplacementPolicy"))...)
	return append(allErrs, validateRestartPolicy(spec, fldPath)...)
}

func isIndexed(spec *batchv1.JobSpec) bool {
	return ptr.Deref(spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion
}

// validateCompletionMode: NonIndexed or Indexed; an Indexed Job needs completions and
// keeps parallelism and maxFailedIndexes within kube's limits.
func validateCompletionMode(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	mode := *spec.CompletionMode
	if mode != batchv1.NonIndexedCompletion && mode != batchv1.IndexedCompletion {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("completionMode"), mode, []batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
	}
	if mode != batchv1.IndexedCompletion {
		return allErrs
	}
	if spec.Completions == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("completions"), fmt.Sprintf("when completion mode is %s", batchv1.IndexedCompletion)))
	}
	if spec.Parallelism != nil && *spec.Parallelism > MaxParallelismForIndexedJob {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("parallelism"), *spec.Parallelism,
			fmt.Sprintf("must be less than or equal to %d when completion mode is %s", MaxParallelismForIndexedJob, batchv1.IndexedCompletion)))
	}
	if spec.Completions != nil && spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > *spec.Completions {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxFailedIndexes"), *spec.MaxFailedIndexes, "must be less than or equal to completions"))
	}
	if spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > MaxFailedIndexesForIndexedJob {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxFailedIndexes"), *spec.MaxFailedIndexes, fmt.Sprintf("must be less than or equal to %d", MaxFailedIndexesForIndexedJob)))
	}
	if spec.Completions != nil && *spec.Completions > CompletionsSoftLimit && spec.BackoffLimitPerIndex != nil {
		if spec.MaxFailedIndexes == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("maxFailedIndexes"), fmt.Sprintf("must be specified when completions is above %d", CompletionsSoftLimit)))
		}
		if spec.Parallelism != nil && *spec.Parallelism > parallelismLimitForHighCompletions {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("parallelism"), *spec.Parallelism,
				fmt.Sprintf("must be less than or equal to %d when completions are above %d and used with backoff limit per index", parallelismLimitForHighCompletions, CompletionsSoftLimit)))
		}
		if spec.MaxFailedIndexes != nil && *spec.MaxFailedIndexes > maxFailedIndexesLimitForHighCompletions {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("maxFailedIndexes"), *spec.MaxFailedIndexes,
				fmt.Sprintf("must be less than or equal to %d when completions are above %d and used with backoff limit per index", maxFailedIndexesLimitForHighCompletions, CompletionsSoftLimit)))
		}
	}
	return allErrs
}

// validateRestartPolicy: OnFailure or Never (Always and unset are "Required"), and
// Never when a pod failure policy is set.
func validateRestartPolicy(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	rpPath := fldPath.Child("template", "spec", "restartPolicy")
	switch rp := spec.Template.Spec.RestartPolicy; {
	case rp == corev1.RestartPolicyAlways || rp == "":
		return field.ErrorList{field.Required(rpPath, fmt.Sprintf("valid values: %q, %q", corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever))}
	case rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever:
		return field.ErrorList{field.NotSupported(rpPath, rp, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever})}
	case spec.PodFailurePolicy != nil && rp != corev1.RestartPolicyNever:
		return field.ErrorList{field.Invalid(rpPath, rp, fmt.Sprintf("only %q is supported when podFailurePolicy is specified", corev1.RestartPolicyNever))}
	}
	return nil
}

// validatePodFailurePolicy checks at most 20 rules, each with a known action (FailIndex
// only with backoffLimitPerIndex) and exactly one of onExitCodes and onPodConditions.
// Mirrors validatePodFailurePolicy.
func validatePodFailurePolicy(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	rulesPath := fldPath.Child("rules")
	if n := len(spec.PodFailurePolicy.Rules); n > MaxPodFailurePolicyRules {
		allErrs = append(allErrs, field.TooMany(rulesPath, n, MaxPodFailurePolicyRules))
	}
	containerNames := sets.New[string]()
	for _, c := range spec.Template.Spec.Containers {
		containerNames.Insert(c.Name)
	}
	for _, c := range spec.Template.Spec.InitContainers {
		containerNames.Insert(c.Name)
	}
	for i := range spec.PodFailurePolicy.Rules {
		allErrs = append(allErrs, validatePodFailurePolicyRule(spec, &spec.PodFailurePolicy.Rules[i], rulesPath.Index(i), containerNames)...)
	}
	return allErrs
}

func validatePodFailurePolicyRule(spec *batchv1.JobSpec, rule *batchv1.PodFailurePolicyRule, rulePath *field.Path, containerNames sets.Set[string]) field.ErrorList {
	var allErrs field.ErrorList
	actionPath := rulePath.Child("action")
	switch {
	case rule.Action == "":
		allErrs = append(allErrs, field.Required(actionPath, fmt.Sprintf("valid values: %q", sets.List(supportedPodFailurePolicyActions))))
	case rule.Action == batchv1.PodFailurePolicyActionFailIndex:
		if spec.BackoffLimitPerIndex == nil {
			allErrs = append(allErrs, field.Invalid(actionPath, rule.Action, "requires the backoffLimitPerIndex to be set"))
		}
	case !supportedPodFailurePolicyActions.Has(rule.Action):
		allErrs = append(allErrs, field.NotSupported(actionPath, rule.Action, sets.List(supportedPodFailurePolicyActions)))
	}
	if rule.OnExitCodes != nil {
		allErrs = append(allErrs, validateOnExitCodes(rule.OnExitCodes, rulePath.Child("onExitCodes"), containerNames)...)
	}
	if len(rule.OnPodConditions) > 0 {
		allErrs = append(allErrs, validateOnPodConditions(rule.OnPodConditions, rulePath.Child("onPodConditions"))...)
	}
	if rule.OnExitCodes != nil && len(rule.OnPodConditions) > 0 {
		allErrs = append(allErrs, field.Invalid(rulePath, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
	}
	if rule.OnExitCodes == nil && len(rule.OnPodConditions) == 0 {
		allErrs = append(allErrs, field.Invalid(rulePath, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
	}
	return allErrs
}

// validateOnPodConditions: at most 20 patterns, each a qualified condition type and a
// status of True, False or Unknown.
func validateOnPodConditions(patterns []batchv1.PodFailurePolicyOnPodConditionsPattern, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(patterns) > MaxPodFailurePolicyOnPodConditionsPatterns {
		allErrs = append(allErrs, field.TooMany(fldPath, len(patterns), MaxPodFailurePolicyOnPodConditionsPatterns))
	}
	for j, pattern := range patterns {
		patternPath := fldPath.Index(j)
		for _, msg := range utilvalidation.IsQualifiedName(string(pattern.Type)) {
			allErrs = append(allErrs, field.Invalid(patternPath.Child("type"), pattern.Type, msg))
		}
		statusPath := patternPath.Child("status")
		if pattern.Status == "" {
			allErrs = append(allErrs, field.Required(statusPath, fmt.Sprintf("valid values: %q", sets.List(supportedPodFailurePolicyOnPodConditionsStatus))))
		} else if !supportedPodFailurePolicyOnPodConditionsStatus.Has(pattern.Status) {
			allErrs = append(allErrs, field.NotSupported(statusPath, pattern.Status, sets.List(supportedPodFailurePolicyOnPodConditionsStatus)))
		}
	}
	return allErrs
}

// validateOnExitCodes: operator In or NotIn, containerName one of the template's
// containers, 1 to 255 distinct values in increasing order, 0 not with In.
func validateOnExitCodes(req *batchv1.PodFailurePolicyOnExitCodesRequirement, fldPath *field.Path, containerNames sets.Set[string]) field.ErrorList {
	var allErrs field.ErrorList
	operatorPath := fldPath.Child("operator")
	if req.Operator == "" {
		allErrs = append(allErrs, field.Required(operatorPath, fmt.Sprintf("valid values: %q", sets.List(supportedPodFailurePolicyOnExitCodesOperator))))
	} else if !supportedPodFailurePolicyOnExitCodesOperator.Has(req.Operator) {
		allErrs = append(allErrs, field.NotSupported(operatorPath, req.Operator, sets.List(supportedPodFailurePolicyOnExitCodesOperator)))
	}
	if req.ContainerName != nil && !containerNames.Has(*req.ContainerName) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("containerName"), *req.ContainerName, "must be one of the container or initContainer names in the pod template"))
	}
	valuesPath := fldPath.Child("values")
	if len(req.Values) == 0 {
		allErrs = append(allErrs, field.Invalid(valuesPath, req.Values, "at least one value is required"))
	} else if len(req.Values) > MaxPodFailurePolicyOnExitCodesValues {
		allErrs = append(allErrs, field.TooMany(valuesPath, len(req.Values), MaxPodFailurePolicyOnExitCodesValues))
	}
	ordered := true
	seen := sets.New[int32]()
	for j, v := range req.Values {
		if req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
			allErrs = append(allErrs, field.Invalid(valuesPath.Index(j), v, "must not be 0 for the In operator"))
		}
		if seen.Has(v) {
			allErrs = append(allErrs, field.Duplicate(valuesPath.Index(j), v))
		}
		seen.Insert(v)
		if j > 0 && req.Values[j-1] > v {
			ordered = false
		}
	}
	if !ordered {
		allErrs = append(allErrs, field.Invalid(valuesPath, req.Values, "must be ordered"))
	}
	return allErrs
}

// validateSuccessPolicy: 1 to 20 rules, each with succeededIndexes (the interval format
// of completedIndexes, below completions) and/or succeededCount (at most completions
// and at most the indexes named). Mirrors validateSuccessPolicy.
func validateSuccessPolicy(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	rulesPath := fldPath.Child("rules")
	if len(spec.SuccessPolicy.Rules) == 0 {
		allErrs = append(allErrs, field.Required(rulesPath, "at least one rules must be specified when the successPolicy is specified"))
	}
	if len(spec.SuccessPolicy.Rules) > MaxSuccessPolicyRules {
		allErrs = append(allErrs, field.TooMany(rulesPath, len(spec.SuccessPolicy.Rules), MaxSuccessPolicyRules))
	}
	completions := ptr.Deref(spec.Completions, 0)
	for i, rule := range spec.SuccessPolicy.Rules {
		rulePath := rulesPath.Index(i)
		if rule.SucceededCount == nil && rule.SucceededIndexes == nil {
			allErrs = append(allErrs, field.Required(rulePath, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		var total int32
		if rule.SucceededIndexes != nil {
			p := rulePath.Child("succeededIndexes")
			if len(*rule.SucceededIndexes) > MaxSuccessPolicySucceededIndexesLength {
				allErrs = append(allErrs, field.TooLong(p, "", MaxSuccessPolicySucceededIndexesLength))
			}
			var err error
			if total, err = ValidateIndexesFormat(*rule.SucceededIndexes, completions); err != nil {
				allErrs = append(allErrs, field.Invalid(p, *rule.SucceededIndexes, fmt.Sprintf("error parsing succeededIndexes: %s", err)))
			}
		}
		if rule.SucceededCount != nil {
			p := rulePath.Child("succeededCount")
			allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*rule.SucceededCount), p)...)
			if *rule.SucceededCount > completions {
				allErrs = append(allErrs, field.Invalid(p, *rule.SucceededCount, fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", completions)))
			}
			if rule.SucceededIndexes != nil && *rule.SucceededCount > total {
				allErrs = append(allErrs, field.Invalid(p, *rule.SucceededCount, fmt.Sprintf("must be less than or equal to %d (the number of indexes in the specified succeededIndexes field)", total)))
			}
		}
	}
	return allErrs
}

// validatePodReplacementPolicy: TerminatingOrFailed or Failed, and only Failed with a
// pod failure policy.
func validatePodReplacementPolicy(spec *batchv1.JobSpec, fldPath *field.Path) field.ErrorList {
	p := spec.PodReplacementPolicy
	switch {
	case p == nil:
	case spec.PodFailurePolicy != nil:
		if *p != batchv1.Failed {
			return field.ErrorList{field.NotSupported(fldPath, *p, []batchv1.PodReplacementPolicy{batchv1.Failed})}
		}
	case !supportedPodReplacementPolicy.Has(*p):
		return field.ErrorList{field.NotSupported(fldPath, *p, sets.List(supportedPodReplacementPolicy))}
	}
	return nil
}

// validateIndexedHostname: the hostname of an Indexed Job's last pod, <name>-<completions-1>,
// must be a DNS label.
func validateIndexedHostname(job *batchv1.Job) field.ErrorList {
	if !isIndexed(&job.Spec) || ptr.Deref(job.Spec.Completions, 0) <= 0 {
		return nil
	}
	hostname := fmt.Sprintf("%s-%d", job.Name, *job.Spec.Completions-1)
	if len(utilvalidation.IsDNS1123Label(hostname)) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), job.Name, fmt.Sprintf("will not able to create pod with invalid DNS label: %s", hostname))}
	}
	return nil
}

// validateSpecUpdate checks what may not change: completions (except, for an Indexed
// Job, together with parallelism), selector, template (node affinity, node selector,
// tolerations, labels, annotations and scheduling gates may change while a Job is
// suspended and never started), completionMode, podFailurePolicy,
// backoffLimitPerIndex, managedBy and successPolicy. Mirrors ValidateJobSpecUpdate.
func validateSpecUpdate(newJob, oldJob *batchv1.Job, fldPath *field.Path) field.ErrorList {
	spec, oldSpec := &newJob.Spec, &oldJob.Spec
	var allErrs field.ErrorList
	immutable := func(n, o interface{}, name string) {
		if !apiequality.Semantic.DeepEqual(n, o) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(name), n, "field is immutable"))
		}
	}
	if !isIndexed(spec) {
		immutable(spec.Completions, oldSpec.Completions, "completions")
	} else if !apiequality.Semantic.DeepEqual(spec.Completions, oldSpec.Completions) && spec.Completions != nil &&
		!ptr.Equal(spec.Completions, spec.Parallelism) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("completions"), spec.Completions, "can only be modified in tandem with spec.parallelism"))
	}
	immutable(spec.Selector, oldSpec.Selector, "selector")
	oldTemplate := &oldSpec.Template
	if ptr.Deref(oldSpec.Suspend, false) && oldJob.Status.StartTime == nil {
		// A suspended Job that never ran may be retargeted: its scheduling directives
		// are not compared.
		oldTemplate = oldSpec.Template.DeepCopy()
		t := &spec.Template
		switch {
		case t.Spec.Affinity == nil && oldTemplate.Spec.Affinity != nil:
			oldTemplate.Spec.Affinity.NodeAffinity = nil
			if apiequality.Semantic.DeepEqual(*oldTemplate.Spec.Affinity, corev1.Affinity{}) {
				oldTemplate.Spec.Affinity = nil
			}
		case t.Spec.Affinity != nil && oldTemplate.Spec.Affinity == nil:
			oldTemplate.Spec.Affinity = &corev1.Affinity{NodeAffinity: t.Spec.Affinity.NodeAffinity}
		case t.Spec.Affinity != nil && oldTemplate.Spec.Affinity != nil:
			oldTemplate.Spec.Affinity.NodeAffinity = t.Spec.Affinity.NodeAffinity
		}
		oldTemplate.Spec.NodeSelector = t.Spec.NodeSelector
		oldTemplate.Spec.Tolerations = t.Spec.Tolerations
		oldTemplate.Annotations = t.Annotations
		oldTemplate.Labels = t.Labels
		oldTemplate.Spec.SchedulingGates = t.Spec.SchedulingGates
	}
	immutable(spec.Template, *oldTemplate, "template")
	immutable(spec.CompletionMode, oldSpec.CompletionMode, "completionMode")
	immutable(spec.PodFailurePolicy, oldSpec.PodFailurePolicy, "podFailurePolicy")
	immutable(spec.BackoffLimitPerIndex, oldSpec.BackoffLimitPerIndex, "backoffLimitPerIndex")
	immutable(spec.ManagedBy, oldSpec.ManagedBy, "managedBy")
	immutable(spec.SuccessPolicy, oldSpec.SuccessPolicy, "successPolicy")
	return allErrs
}

// ValidateIndexesFormat parses indexes in the compressed interval format of
// status.completedIndexes ("1,3-5,7"): increasing, every index below completions. It
// returns how many indexes the string names, or an error with kube's wording. Mirrors
// validateIndexesFormat.
func ValidateIndexesFormat(indexes string, completions int32) (int32, error) {
	if indexes == "" {
		return 0, nil
	}
	var last *int32
	var total int32
	for _, s := range strings.Split(indexes, ",") {
		x, y, err := parseIndexInterval(s, completions)
		if err != nil {
			return 0, err
		}
		if last != nil && *last >= x {
			return 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", *last, x)
		}
		total += y - x + 1
		last = &y
	}
	return total, nil
}

func parseIndexInterval(s string, completions int32) (int32, int32, error) {
	limits := strings.Split(s, "-")
	if len(limits) > 2 {
		return 0, 0, fmt.Errorf("the fragment %q violates the requirement that an index interval can have at most two parts separated by '-'", s)
	}
	parse := func(v string) (int32, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("cannot convert string to integer for index: %q", v)
		}
		if n >= int(completions) {
			return 0, fmt.Errorf("too large index: %q", v)
		}
		return int32(n), nil
	}
	x, err := parse(limits[0])
	if err != nil {
		return 0, 0, err
	}
	if len(limits) == 1 {
		return x, x, nil
	}
	y, err := parse(limits[1])
	if err != nil {
		return 0, 0, err
	}
	if x >= y {
		return 0, 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", x, y)
	}
	return x, y, nil
}

// failedIndexesOverlapCompleted returns an error naming the first index both strings
// hold. Unparsable intervals are skipped (the format check reports them).
func failedIndexesOverlapCompleted(completed, failed string, completions int32) error {
	if completed == "" || failed == "" {
		return nil
	}
	type iv struct{ x, y int32 }
	parseAll := func(s string) []iv {
		var out []iv
		for _, part := range strings.Split(s, ",") {
			if x, y, err := parseIndexInterval(part, completions); err == nil {
				out = append(out, iv{x, y})
			}
		}
		return out
	}
	c, f := parseAll(completed), parseAll(failed)
	for i, j := 0, 0; i < len(c) && j < len(f); {
		if c[i].x <= f[j].y && f[j].x <= c[i].y {
			return fmt.Errorf("failedIndexes and completedIndexes overlap at index: %d", max(c[i].x, f[j].x))
		}
		if c[i].x <= f[j].x {
			i++
		} else {
			j++
		}
	}
	return nil
}

// validateStatusUpdate checks a jobs/status write as kube 1.32 does with JobManagedBy
// on: counts never negative, succeeded and failed never decrease (succeeded may for an
// elastic Indexed Job), terminal conditions (Complete, Failed, FailureTarget,
// SuccessCriteriaMet) never removed, Failed only after FailureTarget and Complete only
// after SuccessCriteriaMet, a finished Job without active or terminating pods or
// uncounted pods, completionTime only with Complete and never moved, and well-formed
// completedIndexes and failedIndexes. Rules about a field apply only when it changed,
// as kube's getStatusValidationOptions arranges. Mirrors ValidateJobUpdateStatus.
func validateStatusUpdate(job, oldJob *batchv1.Job) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("status")
	st, old := &job.Status, &oldJob.Status
	indexed := isIndexed(&job.Spec)
	cond := func(j *batchv1.Job, t batchv1.JobConditionType) bool { return HasCondition(j, t) }
	changed := func(t batchv1.JobConditionType) bool { return cond(job, t) != cond(oldJob, t) }
	finished := func(j *batchv1.Job) bool {
		return cond(j, batchv1.JobComplete) || cond(j, batchv1.JobFailed)
	}
	isFinished := finished(job)
	finishedChanged := isFinished != finished(oldJob)
	completedChanged := st.CompletedIndexes != old.CompletedIndexes
	failedIdxChanged := !ptr.Equal(st.FailedIndexes, old.FailedIndexes)
	activeChanged := st.Active != old.Active
	startChanged := !timeEqual(st.StartTime, old.StartTime)
	completionChanged := !timeEqual(st.CompletionTime, old.CompletionTime)
	invalid := func(name string, v interface{}, msg string) {
		allErrs = append(allErrs, field.Invalid(p.Child(name), v, msg))
	}

	for _, c := range []struct {
		name string
		v    *int32
	}{{"active", &st.Active}, {"succeeded", &st.Succeeded}, {"failed", &st.Failed}, {"ready", st.Ready}, {"terminating", st.Terminating}} {
		if c.v != nil {
			allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*c.v), p.Child(c.name))...)
		}
	}
	if u := st.UncountedTerminatedPods; u != nil {
		up := p.Child("uncountedTerminatedPods")
		seen := sets.New[types.UID]()
		for _, list := range []struct {
			name string
			uids []types.UID
		}{{"succeeded", u.Succeeded}, {"failed", u.Failed}} {
			for i, uid := range list.uids {
				ip := up.Child(list.name).Index(i)
				switch {
				case uid == "":
					allErrs = append(allErrs, field.Invalid(ip, uid, "must not be empty"))
				case seen.Has(uid):
					allErrs = append(allErrs, field.Duplicate(ip, uid))
				default:
					seen.Insert(uid)
				}
			}
		}
	}
	conditions := func(msg string) { invalid("conditions", field.OmitValueType{}, msg) }
	complete, failed := cond(job, batchv1.JobComplete), cond(job, batchv1.JobFailed)
	failureTarget, successMet := cond(job, batchv1.JobFailureTarget), cond(job, batchv1.JobSuccessCriteriaMet)
	if (changed(batchv1.JobComplete) || changed(batchv1.JobFailed)) && complete && failed {
		conditions("cannot set Complete=True and Failed=true conditions")
	}
	if (changed(batchv1.JobComplete) || changed(batchv1.JobFailureTarget)) && complete && failureTarget {
		conditions("cannot set Complete=True and FailureTarget=true conditions")
	}
	if (changed(batchv1.JobComplete) || completionChanged) && st.CompletionTime != nil && !complete {
		invalid("completionTime", st.CompletionTime, "cannot set completionTime when there is no Complete=True condition")
	}
	if (changed(batchv1.JobComplete) || completionChanged) && st.CompletionTime == nil && complete {
		allErrs = append(allErrs, field.Required(p.Child("completionTime"), "completionTime is required for Complete jobs"))
	}
	if (startChanged || completionChanged) && st.StartTime != nil && st.CompletionTime != nil && st.CompletionTime.Before(st.StartTime) {
		invalid("completionTime", st.CompletionTime, "completionTime cannot be set before startTime")
	}
	if (changed(batchv1.JobFailed) || failedIdxChanged) && failed && !failureTarget {
		conditions("cannot set Failed=True condition without the FailureTarget=true condition")
	}
	if (changed(batchv1.JobComplete) || changed(batchv1.JobSuccessCriteriaMet)) && complete && !successMet {
		conditions("cannot set Complete=True condition without the SuccessCriteriaMet=true condition")
	}
	if (finishedChanged || activeChanged) && st.Active > 0 && isFinished {
		invalid("active", st.Active, "active>0 is invalid for finished job")
	}
	if (finishedChanged || startChanged) && st.StartTime == nil && isFinished {
		allErrs = append(allErrs, field.Required(p.Child("startTime"), "startTime is required for finished job"))
	}
	uncountedChanged := !apiequality.Semantic.DeepEqual(st.UncountedTerminatedPods, old.UncountedTerminatedPods)
	if u := st.UncountedTerminatedPods; (finishedChanged || uncountedChanged) && isFinished && u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		invalid("uncountedTerminatedPods", u, "uncountedTerminatedPods needs to be empty for finished job")
	}
	if completions := job.Spec.Completions; completions != nil {
		if completedChanged {
			if _, err := ValidateIndexesFormat(st.CompletedIndexes, *completions); err != nil {
				invalid("completedIndexes", st.CompletedIndexes, fmt.Sprintf("error parsing completedIndexes: %s", err))
			}
		}
		if failedIdxChanged && job.Spec.BackoffLimitPerIndex != nil && st.FailedIndexes != nil {
			if _, err := ValidateIndexesFormat(*st.FailedIndexes, *completions); err != nil {
				invalid("failedIndexes", st.FailedIndexes, fmt.Sprintf("error parsing failedIndexes: %s", err))
			}
		}
		if (failedIdxChanged || completedChanged) && st.FailedIndexes != nil {
			if err := failedIndexesOverlapCompleted(st.CompletedIndexes, *st.FailedIndexes, *completions); err != nil {
				invalid("failedIndexes", *st.FailedIndexes, err.Error())
			}
		}
	}
	if completedChanged && st.CompletedIndexes != "" && !indexed {
		invalid("completedIndexes", st.CompletedIndexes, "cannot set non-empty completedIndexes when non-indexed completion mode")
	}
	if failedIdxChanged && job.Spec.BackoffLimitPerIndex == nil && st.FailedIndexes != nil {
		invalid("failedIndexes", *st.FailedIndexes, "cannot set non-null failedIndexes when backoffLimitPerIndex is null")
	}
	terminatingChanged := !ptr.Equal(st.Terminating, old.Terminating)
	if (finishedChanged || terminatingChanged) && ptr.Deref(st.Terminating, 0) > 0 && isFinished {
		invalid("terminating", st.Terminating, "terminating>0 is invalid for finished job")
	}
	if (!ptr.Equal(st.Ready, old.Ready) || activeChanged) && st.Ready != nil && *st.Ready > st.Active {
		invalid("ready", *st.Ready, "cannot set more ready pods than active")
	}
	if successMet && failed {
		conditions("cannot set SuccessCriteriaMet=True and Failed=true conditions")
	}
	if successMet && failureTarget {
		conditions("cannot set SuccessCriteriaMet=True and FailureTarget=true conditions")
	}
	if job.Spec.SuccessPolicy != nil && !successMet && complete {
		conditions("cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True")
	}

	// Transitions.
	for _, t := range []batchv1.JobConditionType{batchv1.JobFailed, batchv1.JobComplete, batchv1.JobFailureTarget} {
		if cond(oldJob, t) && !cond(job, t) {
			conditions(fmt.Sprintf("cannot disable the terminal %s=True condition", t))
		}
	}
	if st.Failed < old.Failed {
		invalid("failed", st.Failed, "cannot decrease the failed counter")
	}
	if (!indexed || !ptr.Equal(job.Spec.Completions, job.Spec.Parallelism)) && st.Succeeded < old.Succeeded {
		invalid("succeeded", st.Succeeded, "cannot decrease the succeeded counter")
	}
	if st.CompletionTime != nil && old.CompletionTime != nil && !timeEqual(st.CompletionTime, old.CompletionTime) {
		invalid("completionTime", st.CompletionTime, "completionTime cannot be mutated")
	}
	if old.StartTime != nil && startChanged && !ptr.Deref(job.Spec.Suspend, false) {
		allErrs = append(allErrs, field.Required(p.Child("startTime"), "startTime cannot be removed for unsuspended job"))
	}
	if cond(oldJob, batchv1.JobSuccessCriteriaMet) && !successMet {
		conditions("cannot disable the SuccessCriteriaMet=True condition")
	}
	if cond(oldJob, batchv1.JobComplete) && !cond(oldJob, batchv1.JobSuccessCriteriaMet) && successMet {
		conditions("cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions")
	}
	return allErrs
}

// timeEqual compares two optional timestamps to the second, as they are stored.
func timeEqual(a, b *metav1.Time) bool { return a.Equal(b) }
