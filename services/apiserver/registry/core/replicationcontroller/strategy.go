// Package replicationcontroller is the core/v1 replicationcontrollers resource: its
// strategy (defaulting, validation, generation, field selectors, kubectl's columns, the
// orphaning default of v1 deletes), replicationcontrollers/status and
// replicationcontrollers/scale. Mirrors k8s.io/kubernetes/pkg/registry/core/
// replicationcontroller and ValidateReplicationController in pkg/apis/core/validation.
package replicationcontroller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Strategy is the replicationcontrollers strategy. Mirrors rcStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of replicationcontrollers/status: only status changes.
// Mirrors rcStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy                = Strategy{}
	_ registry.TablePrinter            = Strategy{}
	_ registry.ResetFieldsStrategy     = Strategy{}
	_ registry.OrphanByDefaultStrategy = Strategy{}
	_ registry.ResetFieldsStrategy     = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what core/v1 defaults: an empty selector and empty labels take the
// template's labels, replicas is 1, and the pod template gets a pod spec's defaults.
// Mirrors SetDefaults_ReplicationController and the generated SetObjectDefaults.
func SetDefaults(rc *corev1.ReplicationController) {
	if t := rc.Spec.Template; t != nil && t.Labels != nil {
		if len(rc.Spec.Selector) == 0 {
			rc.Spec.Selector = maps.Clone(t.Labels)
		}
		if len(rc.Labels) == 0 {
			rc.Labels = maps.Clone(t.Labels)
		}
	}
	if rc.Spec.Replicas == nil {
		rc.Spec.Replicas = ptr.To(int32(1))
	}
	if rc.Spec.Template != nil {
		defaults.SetPodSpecDefaults(&rc.Spec.Template.Spec)
	}
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	rc := obj.(*corev1.ReplicationController)
	rc.Status = corev1.ReplicationControllerStatus{}
	rc.Generation = 1
	SetDefaults(rc)
}

// PrepareForUpdate keeps the stored status, fills defaults (kube defaults every object it
// decodes), and bumps the generation when the spec changes, so status.observedGeneration
// tells whether the controller has seen the change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRC, oldRC := obj.(*corev1.ReplicationController), old.(*corev1.ReplicationController)
	newRC.Status = oldRC.Status
	SetDefaults(newRC)
	if !apiequality.Semantic.DeepEqual(newRC.Spec, oldRC.Spec) {
		newRC.Generation = oldRC.Generation + 1
	}
}

// Validate checks a new ReplicationController. Mirrors ValidateReplicationController.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	rc := obj.(*corev1.ReplicationController)
	allErrs := apivalidation.ValidateObjectMeta(&rc.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, ValidateSpec(&rc.Spec, field.NewPath("spec"))...)
}

// ValidateSpec checks a ReplicationController's spec at specPath: minReadySeconds and
// replicas not negative, a non-empty selector ("spec.selector: Required value"), and a
// template ("spec.template: Required value") whose labels the selector matches, valid as
// a pod template, with restartPolicy Always and no activeDeadlineSeconds. Unlike a
// ReplicaSet's, the selector may change on update. Mirrors
// ValidateReplicationControllerSpec and ValidatePodTemplateSpecForRC.
func ValidateSpec(spec *corev1.ReplicationControllerSpec, specPath *field.Path) field.ErrorList {
	allErrs := workloadvalidation.ValidateNonnegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))
	selector := labels.Set(spec.Selector).AsSelector()
	if selector.Empty() {
		allErrs = append(allErrs, field.Required(specPath.Child("selector"), ""))
	}
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(ptr.Deref(spec.Replicas, 0)), specPath.Child("replicas"))...)
	tmplPath := specPath.Child("template")
	template := spec.Template
	if template == nil {
		return append(allErrs, field.Required(tmplPath, ""))
	}
	if !selector.Empty() && !selector.Matches(labels.Set(template.Labels)) {
		allErrs = append(allErrs, field.Invalid(tmplPath.Child("metadata", "labels"), template.Labels, "`selector` does not match template `labels`"))
	}
	allErrs = append(allErrs, corevalidation.ValidatePodTemplateSpec(template, tmplPath)...)
	allErrs = append(allErrs, workloadvalidation.ValidateRestartPolicyAlways(template, tmplPath)...)
	if template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Forbidden(tmplPath.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in ReplicationController is not Supported"))
	}
	return allErrs
}

// ValidateUpdate checks an update: metadata rules and a valid spec. Mirrors
// ValidateReplicationControllerUpdate.
func (s Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newRC, oldRC := obj.(*corev1.ReplicationController), old.(*corev1.ReplicationController)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRC.ObjectMeta, &oldRC.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateSpec(&newRC.Spec, field.NewPath("spec"))...)
}

// GetAttrs returns labels and the selectable fields: metadata and status.replicas.
// Mirrors ControllerToSelectableFields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	rc, ok := obj.(*corev1.ReplicationController)
	if !ok {
		return nil, nil, fmt.Errorf("not a replicationcontroller: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&rc.ObjectMeta, true)
	f["status.replicas"] = fmt.Sprint(rc.Status.Replicas)
	return labels.Set(rc.Labels), f, nil
}

// OrphanDependentsByDefault is true: a v1 delete that names no propagation policy leaves
// the pods, as before the garbage collector existed (kubectl delete names Background).
// Mirrors rcStrategy.DefaultGarbageCollectionPolicy for core/v1.
func (Strategy) OrphanDependentsByDefault() bool { return true }

// GetResetFields: the main resource keeps the stored status. Mirrors rcStrategy.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// TableColumns are NAME DESIRED CURRENT READY AGE, and wide CONTAINERS IMAGES SELECTOR.
// Mirrors the printer's replicationControllerColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Desired", Type: "integer", Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]},
		{Name: "Current", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]},
		{Name: "Ready", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"]},
	}
}

// TableRow prints one ReplicationController. Mirrors printReplicationController.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	rc := obj.(*corev1.ReplicationController)
	var containers []corev1.Container
	if rc.Spec.Template != nil {
		containers = rc.Spec.Template.Spec.Containers
	}
	names, images := pod.ContainerCells(containers)
	return []interface{}{
		rc.Name, int64(ptr.Deref(rc.Spec.Replicas, 0)), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas),
		registry.TranslateTimestampSince(rc.CreationTimestamp),
		names, images, labels.FormatLabels(rc.Spec.Selector),
	}
}

// GetResetFields: replicationcontrollers/status keeps the stored spec. Mirrors
// rcStatusStrategy.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec. Mirrors rcStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.ReplicationController).Spec = old.(*corev1.ReplicationController).Spec
}

// ValidateUpdate checks the status counts: none negative, none of the replica counts
// above status.replicas, availableReplicas not above readyReplicas. Mirrors
// ValidateReplicationControllerStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newRC, oldRC := obj.(*corev1.ReplicationController), old.(*corev1.ReplicationController)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRC.ObjectMeta, &oldRC.ObjectMeta, field.NewPath("metadata"))
	st, p := newRC.Status, field.NewPath("status")
	for _, c := range []struct {
		name  string
		value int64
	}{
		{"replicas", int64(st.Replicas)}, {"fullyLabeledReplicas", int64(st.FullyLabeledReplicas)},
		{"readyReplicas", int64(st.ReadyReplicas)}, {"availableReplicas", int64(st.AvailableReplicas)},
		{"observedGeneration", st.ObservedGeneration},
	} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(c.value, p.Child(c.name))...)
	}
	for _, c := range []struct {
		name  string
		value int32
	}{{"fullyLabeledReplicas", st.FullyLabeledReplicas}, {"readyReplicas", st.ReadyReplicas}, {"availableReplicas", st.AvailableReplicas}} {
		if c.value > st.Replicas {
			allErrs = append(allErrs, field.Invalid(p.Child(c.name), c.value, "cannot be greater than status.replicas"))
		}
	}
	if st.AvailableReplicas > st.ReadyReplicas {
		allErrs = append(allErrs, field.Invalid(p.Child("availableReplicas"), st.AvailableReplicas, "cannot be greater than readyReplicas"))
	}
	return allErrs
}

// Scalable reads and writes a ReplicationController's replica counts for
// replicationcontrollers/scale.
type Scalable struct{}

// Replicas returns spec.replicas, status.replicas and the selector as matchLabels, whose
// string form is kube's labels.SelectorFromSet(spec.selector).
func (Scalable) Replicas(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
	rc := obj.(*corev1.ReplicationController)
	return ptr.Deref(rc.Spec.Replicas, 0), rc.Status.Replicas, &metav1.LabelSelector{MatchLabels: rc.Spec.Selector}
}

// SetReplicas sets spec.replicas.
func (Scalable) SetReplicas(obj runtime.Object, replicas int32) {
	obj.(*corev1.ReplicationController).Spec.Replicas = &replicas
}
