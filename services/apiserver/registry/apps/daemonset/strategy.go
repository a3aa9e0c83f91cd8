// Package daemonset is the apps/v1 daemonsets resource: its strategy (defaulting,
// validation, generation and template generation, kubectl's columns) and
// daemonsets/status. Mirrors k8s.io/kubernetes/pkg/registry/apps/daemonset and the
// DaemonSet rules of pkg/apis/apps/validation.
package daemonset

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Strategy is the daemonsets strategy. Mirrors daemonSetStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of daemonsets/status: only status changes. Mirrors
// daemonSetStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what apps/v1 defaults: updateStrategy RollingUpdate with
// maxUnavailable 1 and maxSurge 0, revisionHistoryLimit 10, and the pod template's
// defaults. Mirrors SetDefaults_DaemonSet (apps/v1).
func SetDefaults(ds *appsv1.DaemonSet) {
	us := &ds.Spec.UpdateStrategy
	if us.Type == "" {
		us.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if us.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if us.RollingUpdate == nil {
			us.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if us.RollingUpdate.MaxUnavailable == nil {
			one := intstr.FromInt32(1)
			us.RollingUpdate.MaxUnavailable = &one
		}
		if us.RollingUpdate.MaxSurge == nil {
			zero := intstr.FromInt32(0)
			us.RollingUpdate.MaxSurge = &zero
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		limit := int32(10)
		ds.Spec.RevisionHistoryLimit = &limit
	}
	defaults.SetPodSpecDefaults(&ds.Spec.Template.Spec)
}

// TemplateGeneration is the DaemonSet's template generation, which apps/v1 carries in
// the deprecated.daemonset.template.generation annotation (kube's internal
// spec.templateGeneration): 0 when absent or not a number.
func TemplateGeneration(ds *appsv1.DaemonSet) int64 {
	g, err := strconv.ParseInt(ds.Annotations[appsv1.DeprecatedTemplateGeneration], 10, 64)
	if err != nil {
		return 0
	}
	return g
}

func setTemplateGeneration(ds *appsv1.DaemonSet, g int64) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = strconv.FormatInt(g, 10)
}

// PrepareForCreate clears status, sets generation 1 and template generation 1 (unless a
// higher one was given), and fills defaults. Mirrors daemonSetStrategy.PrepareForCreate.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ds := obj.(*appsv1.DaemonSet)
	ds.Status = appsv1.DaemonSetStatus{}
	ds.Generation = 1
	setTemplateGeneration(ds, max(TemplateGeneration(ds), 1))
	SetDefaults(ds)
}

// PrepareForUpdate keeps the stored status and template generation, fills defaults, and
// bumps both the template generation and the generation when the template changes, the
// generation alone when another part of the spec does. Mirrors
// daemonSetStrategy.PrepareForUpdate.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newDS, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	newDS.Status = oldDS.Status
	SetDefaults(newDS)
	setTemplateGeneration(newDS, TemplateGeneration(oldDS))
	if !apiequality.Semantic.DeepEqual(newDS.Spec.Template, oldDS.Spec.Template) {
		setTemplateGeneration(newDS, TemplateGeneration(oldDS)+1)
		newDS.Generation = oldDS.Generation + 1
		return
	}
	if !apiequality.Semantic.DeepEqual(newDS.Spec, oldDS.Spec) {
		newDS.Generation = oldDS.Generation + 1
	}
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apps/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new DaemonSet. Mirrors ValidateDaemonSet.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateDaemonSet(obj.(*appsv1.DaemonSet))
}

// ValidateDaemonSet checks a DaemonSet's metadata (a DNS subdomain name) and spec (see
// ValidateDaemonSetSpec). Mirrors ValidateDaemonSet.
func ValidateDaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&ds.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(TemplateGeneration(ds), field.NewPath("spec", "templateGeneration"))...)
	return append(allErrs, ValidateDaemonSetSpec(&ds.Spec, field.NewPath("spec"))...)
}

// ValidateDaemonSetSpec checks a DaemonSet spec at fldPath with kube's paths and
// messages: a well-formed, non-empty selector ("empty selector is invalid for
// daemonset") that matches the template's labels ("`selector` does not match template
// `labels`"; a missing selector matches nothing), a valid pod template with
// restartPolicy Always and no activeDeadlineSeconds, non-negative minReadySeconds and
// revisionHistoryLimit, and the update strategy (see ValidateDaemonSetUpdateStrategy).
// Mirrors ValidateDaemonSetSpec.
func ValidateDaemonSetSpec(spec *appsv1.DaemonSetSpec, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))
	selector, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err == nil && !selector.Matches(labels.Set(spec.Template.Labels)) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("template", "metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}
	if spec.Selector != nil && len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("selector"), spec.Selector, "empty selector is invalid for daemonset"))
	}
	tmplPath := fldPath.Child("template")
	allErrs = append(allErrs, corevalidation.ValidatePodTemplateSpec(&spec.Template, tmplPath)...)
	allErrs = append(allErrs, workloadvalidation.ValidateRestartPolicyAlways(&spec.Template, tmplPath)...)
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Invalid(tmplPath.Child("spec", "activeDeadlineSeconds"), *spec.Template.Spec.ActiveDeadlineSeconds, "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(spec.MinReadySeconds), fldPath.Child("minReadySeconds"))...)
	allErrs = append(allErrs, ValidateDaemonSetUpdateStrategy(&spec.UpdateStrategy, fldPath.Child("updateStrategy"))...)
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.RevisionHistoryLimit), fldPath.Child("revisionHistoryLimit"))...)
	}
	return allErrs
}

// ValidateDaemonSetUpdateStrategy checks the update strategy: OnDelete, or
// RollingUpdate with its rollingUpdate set (see ValidateRollingUpdateDaemonSet); any
// other type is "Unsupported value". Mirrors ValidateDaemonSetUpdateStrategy.
func ValidateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, fldPath *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		return nil
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if s.RollingUpdate == nil {
			return field.ErrorList{field.Required(fldPath.Child("rollingUpdate"), "")}
		}
		return ValidateRollingUpdateDaemonSet(s.RollingUpdate, fldPath.Child("rollingUpdate"))
	default:
		return field.ErrorList{field.NotSupported(fldPath, s,
			[]string{string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)})}
	}
}

// ValidateRollingUpdateDaemonSet checks maxUnavailable and maxSurge: each a
// non-negative integer or a percentage of at most 100%, and exactly one of them non-zero
// ("maxSurge: Invalid value: ...: may not be set when maxUnavailable is non-zero",
// "maxUnavailable: Required value: cannot be 0 when maxSurge is 0"). Mirrors
// ValidateRollingUpdateDaemonSet.
func ValidateRollingUpdateDaemonSet(ru *appsv1.RollingUpdateDaemonSet, fldPath *field.Path) field.ErrorList {
	maxUnavailable, maxSurge := deref(ru.MaxUnavailable), deref(ru.MaxSurge)
	var allErrs field.ErrorList
	allErrs = append(allErrs, workloadvalidation.ValidatePositiveIntOrPercent(maxUnavailable, fldPath.Child("maxUnavailable"))...)
	allErrs = append(allErrs, workloadvalidation.ValidatePositiveIntOrPercent(maxSurge, fldPath.Child("maxSurge"))...)
	allErrs = append(allErrs, workloadvalidation.IsNotMoreThan100Percent(maxUnavailable, fldPath.Child("maxUnavailable"))...)
	allErrs = append(allErrs, workloadvalidation.IsNotMoreThan100Percent(maxSurge, fldPath.Child("maxSurge"))...)
	hasUnavailable := workloadvalidation.IntOrPercentValue(maxUnavailable) != 0
	hasSurge := workloadvalidation.IntOrPercentValue(maxSurge) != 0
	switch {
	case hasUnavailable && hasSurge:
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxSurge"), maxSurge, "may not be set when maxUnavailable is non-zero"))
	case !hasUnavailable && !hasSurge:
		allErrs = append(allErrs, field.Required(fldPath.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
	}
	return allErrs
}

// deref is *v, or the integer 0 for nil (kube's internal fields are not pointers).
func deref(v *intstr.IntOrString) intstr.IntOrString {
	if v == nil {
		return intstr.FromInt32(0)
	}
	return *v
}

// ValidateUpdate checks an update: a valid DaemonSet whose selector did not change.
// Mirrors daemonSetStrategy.ValidateUpdate and ValidateDaemonSetUpdate (the template
// generation rules hold by construction: PrepareForUpdate sets it).
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newDS, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newDS.ObjectMeta, &oldDS.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateDaemonSetSpec(&newDS.Spec, field.NewPath("spec"))...)
	return append(allErrs, workloadvalidation.ValidateSelectorUnchanged(newDS.Spec.Selector, oldDS.Spec.Selector, field.NewPath("spec"))...)
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ds, ok := obj.(*appsv1.DaemonSet)
	if !ok {
		return nil, nil, fmt.Errorf("not a daemonset: %T", obj)
	}
	return labels.Set(ds.Labels), registry.ObjectMetaFieldsSet(&ds.ObjectMeta, true), nil
}

// TableColumns are NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE,
// and wide CONTAINERS IMAGES SELECTOR. Mirrors printDaemonSet's column definitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Desired", Type: "integer", Description: "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod)."},
		{Name: "Current", Type: "integer", Description: "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."},
		{Name: "Ready", Type: "integer", Description: "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition."},
		{Name: "Up-to-date", Type: "integer", Description: "The total number of nodes that are running updated daemon pod"},
		{Name: "Available", Type: "integer", Description: "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)"},
		{Name: "Node Selector", Type: "string", Description: "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node."},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that are managed by the daemon set. Must match in order to be controlled."},
	}
}

// TableRow prints one DaemonSet from its status counts; NODE SELECTOR is the template's
// nodeSelector ("<none>" when empty). Mirrors printDaemonSet.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ds := obj.(*appsv1.DaemonSet)
	st := ds.Status
	names, images := pod.ContainerCells(ds.Spec.Template.Spec.Containers)
	return []interface{}{
		ds.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
		int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		registry.TranslateTimestampSince(ds.CreationTimestamp),
		names, images, metav1.FormatLabelSelector(ds.Spec.Selector),
	}
}

// PrepareForUpdate keeps the stored spec and template generation. Mirrors
// daemonSetStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newDS, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	newDS.Spec = oldDS.Spec
	setTemplateGeneration(newDS, TemplateGeneration(oldDS))
}

// GetResetFields: daemonsets/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apps/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// ValidateUpdate checks the status counts (each non-negative) and that collisionCount
// is not decremented ("status.collisionCount: Invalid value: ...: cannot be
// decremented"). Mirrors ValidateDaemonSetStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newDS, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newDS.ObjectMeta, &oldDS.ObjectMeta, field.NewPath("metadata"))
	st, p := newDS.Status, field.NewPath("status")
	for _, c := range []struct {
		name  string
		value int64
	}{
		{"currentNumberScheduled", int64(st.CurrentNumberScheduled)},
		{"numberMisscheduled", int64(st.NumberMisscheduled)},
		{"desiredNumberScheduled", int64(st.DesiredNumberScheduled)},
		{"numberReady", int64(st.NumberReady)},
		{"observedGeneration", st.ObservedGeneration},
		{"updatedNumberScheduled", int64(st.UpdatedNumberScheduled)},
		{"numberAvailable", int64(st.NumberAvailable)},
		{"numberUnavailable", int64(st.NumberUnavailable)},
	} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(c.value, p.Child(c.name))...)
	}
	if st.CollisionCount != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*st.CollisionCount), p.Child("collisionCount"))...)
	}
	if isDecremented(st.CollisionCount, oldDS.Status.CollisionCount) {
		value := int32(0)
		if st.CollisionCount != nil {
			value = *st.CollisionCount
		}
		allErrs = append(allErrs, field.Invalid(p.Child("collisionCount"), value, "cannot be decremented"))
	}
	return allErrs
}

// isDecremented mirrors apivalidation.IsDecremented: a set count that is unset or lower.
func isDecremented(update, old *int32) bool {
	if update == nil && old != nil {
		return true
	}
	if update == nil || old == nil {
		return false
	}
	return *update < *old
}
