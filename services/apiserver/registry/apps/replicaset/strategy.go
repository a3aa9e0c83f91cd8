// Package replicaset is the apps/v1 replicasets resource: its strategy (defaulting,
// validation, generation, field selectors, kubectl's columns), replicasets/status and
// replicasets/scale. Mirrors k8s.io/kubernetes/pkg/registry/apps/replicaset.
package replicaset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
)

// Strategy is the replicasets strategy. Mirrors rsStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of replicasets/status: only status changes. Mirrors
// rsStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills replicas (1) and the pod template's defaults. Mirrors apps/v1
// SetDefaults_ReplicaSet.
func SetDefaults(rs *appsv1.ReplicaSet) {
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = ptr.To(int32(1))
	}
	defaults.SetPodSpecDefaults(&rs.Spec.Template.Spec)
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	rs := obj.(*appsv1.ReplicaSet)
	rs.Status = appsv1.ReplicaSetStatus{}
	rs.Generation = 1
	SetDefaults(rs)
}

// PrepareForUpdate keeps the stored status, fills defaults, and bumps the generation
// when the spec changes, so status.observedGeneration tells whether the controller has
// seen the change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRS, oldRS := obj.(*appsv1.ReplicaSet), old.(*appsv1.ReplicaSet)
	newRS.Status = oldRS.Status
	SetDefaults(newRS)
	if !apiequality.Semantic.DeepEqual(newRS.Spec, oldRS.Spec) {
		newRS.Generation = oldRS.Generation + 1
	}
}

// Validate checks a new ReplicaSet. Mirrors ValidateReplicaSet.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	rs := obj.(*appsv1.ReplicaSet)
	allErrs := apivalidation.ValidateObjectMeta(&rs.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateSpec(&rs.Spec, field.NewPath("spec"))...)
}

func validateSpec(spec *appsv1.ReplicaSetSpec, specPath *field.Path) field.ErrorList {
	allErrs := workloadvalidation.ValidateNonnegative(int64(ptr.Deref(spec.Replicas, 0)), specPath.Child("replicas"))
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	allErrs = append(allErrs, workloadvalidation.ValidateSelectorAndTemplate(spec.Selector, &spec.Template, specPath)...)
	return append(allErrs, workloadvalidation.ValidateRestartPolicyAlways(&spec.Template, specPath.Child("template"))...)
}

// ValidateUpdate checks an update: a valid ReplicaSet whose selector did not change.
// Mirrors ValidateReplicaSetUpdate.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newRS, oldRS := obj.(*appsv1.ReplicaSet), old.(*appsv1.ReplicaSet)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRS.ObjectMeta, &oldRS.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&newRS.Spec, field.NewPath("spec"))...)
	return append(allErrs, workloadvalidation.ValidateSelectorUnchanged(newRS.Spec.Selector, oldRS.Spec.Selector, field.NewPath("spec"))...)
}

// GetAttrs returns labels and the selectable fields: metadata and status.replicas.
// Mirrors ReplicaSetToSelectableFields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return nil, nil, fmt.Errorf("not a replicaset: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&rs.ObjectMeta, true)
	f["status.replicas"] = fmt.Sprint(rs.Status.Replicas)
	return labels.Set(rs.Labels), f, nil
}

// TableColumns are NAME DESIRED CURRENT READY AGE, and wide CONTAINERS IMAGES SELECTOR.
// Mirrors printReplicaSet.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Desired", Type: "integer", Description: "Replicas is the number of desired replicas."},
		{Name: "Current", Type: "integer", Description: "Replicas is the most recently observed number of replicas."},
		{Name: "Ready", Type: "integer", Description: "The number of ready replicas for this replica set."},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "Selector is a label query over pods that should match the replica count."},
	}
}

// TableRow prints one ReplicaSet.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	rs := obj.(*appsv1.ReplicaSet)
	names, images := pod.ContainerCells(rs.Spec.Template.Spec.Containers)
	return []interface{}{
		rs.Name, int64(ptr.Deref(rs.Spec.Replicas, 0)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas),
		registry.TranslateTimestampSince(rs.CreationTimestamp),
		names, images, metav1.FormatLabelSelector(rs.Spec.Selector),
	}
}

// PrepareForUpdate keeps the stored spec. Mirrors rsStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*appsv1.ReplicaSet).Spec = old.(*appsv1.ReplicaSet).Spec
}

// ValidateUpdate checks the status counts. Mirrors ValidateReplicaSetStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newRS, oldRS := obj.(*appsv1.ReplicaSet), old.(*appsv1.ReplicaSet)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newRS.ObjectMeta, &oldRS.ObjectMeta, field.NewPath("metadata"))
	st, p := newRS.Status, field.NewPath("status")
	for name, v := range map[string]int32{"replicas": st.Replicas, "fullyLabeledReplicas": st.FullyLabeledReplicas,
		"readyReplicas": st.ReadyReplicas, "availableReplicas": st.AvailableReplicas} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(v), p.Child(name))...)
	}
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(st.ObservedGeneration, p.Child("observedGeneration"))...)
	if st.ReadyReplicas > st.Replicas {
		allErrs = append(allErrs, field.Invalid(p.Child("readyReplicas"), st.ReadyReplicas, "cannot be greater than status.replicas"))
	}
	if st.AvailableReplicas > st.ReadyReplicas {
		allErrs = append(allErrs, field.Invalid(p.Child("availableReplicas"), st.AvailableReplicas, "cannot be greater than readyReplicas"))
	}
	return allErrs
}

// Scalable reads and writes a ReplicaSet's replica counts for replicasets/scale.
type Scalable struct{}

// Replicas returns spec.replicas, status.replicas and the selector.
func (Scalable) Replicas(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
	rs := obj.(*appsv1.ReplicaSet)
	return ptr.Deref(rs.Spec.Replicas, 0), rs.Status.Replicas, rs.Spec.Selector
}

// SetReplicas sets spec.replicas.
func (Scalable) SetReplicas(obj runtime.Object, replicas int32) {
	obj.(*appsv1.ReplicaSet).Spec.Replicas = &replicas
}
