// Package deployment is the apps/v1 deployments resource: its strategy (defaulting,
// validation, generation, kubectl's columns), deployments/status and deployments/scale.
// Mirrors k8s.io/kubernetes/pkg/registry/apps/deployment.
package deployment

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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	workloadvalidation "skiff.dev/services/apiserver/registry/apps/validation"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
)

// Strategy is the deployments strategy. Mirrors deploymentStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of deployments/status: only status changes. Mirrors
// deploymentStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what apps/v1 defaults: replicas 1, strategy RollingUpdate with
// maxUnavailable and maxSurge 25%, revisionHistoryLimit 10, progressDeadlineSeconds 600,
// and the pod template's defaults. Mirrors SetDefaults_Deployment (apps/v1).
func SetDefaults(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptr.To(int32(1))
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if d.Spec.Strategy.RollingUpdate == nil {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
		if d.Spec.Strategy.RollingUpdate.MaxSurge == nil {
			surge := quarter
			d.Spec.Strategy.RollingUpdate.MaxSurge = &surge
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptr.To(int32(10))
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = ptr.To(int32(600))
	}
	defaults.SetPodSpecDefaults(&d.Spec.Template.Spec)
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	d := obj.(*appsv1.Deployment)
	d.Status = appsv1.DeploymentStatus{}
	d.Generation = 1
	SetDefaults(d)
}

// PrepareForUpdate keeps the stored status, fills defaults, and bumps the generation
// when the spec or the annotations change (kube counts annotations too: they once
// carried rollback requests).
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newD, oldD := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	newD.Status = oldD.Status
	SetDefaults(newD)
	if !apiequality.Semantic.DeepEqual(newD.Spec, oldD.Spec) || !apiequality.Semantic.DeepEqual(newD.Annotations, oldD.Annotations) {
		newD.Generation = oldD.Generation + 1
	}
}

// Validate checks a new Deployment. Mirrors ValidateDeployment.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	d := obj.(*appsv1.Deployment)
	allErrs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, ValidateSpec(&d.Spec, field.NewPath("spec"))...)
}

// ValidateSpec checks a deployment spec at specPath. Mirrors ValidateDeploymentSpec.
func ValidateSpec(spec *appsv1.DeploymentSpec, specPath *field.Path) field.ErrorList {
	allErrs := workloadvalidation.ValidateNonnegative(int64(ptr.Deref(spec.Replicas, 0)), specPath.Child("replicas"))
	allErrs = append(allErrs, workloadvalidation.ValidateSelectorAndTemplate(spec.Selector, &spec.Template, specPath)...)
	allErrs = append(allErrs, workloadvalidation.ValidateRestartPolicyAlways(&spec.Template, specPath.Child("template"))...)
	allErrs = append(allErrs, validateStrategy(&spec.Strategy, specPath.Child("strategy"))...)
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(*spec.RevisionHistoryLimit), specPath.Child("revisionHistoryLimit"))...)
	}
	if spec.ProgressDeadlineSeconds != nil {
		p := *spec.ProgressDeadlineSeconds
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(p), specPath.Child("progressDeadlineSeconds"))...)
		if p <= spec.MinReadySeconds {
			allErrs = append(allErrs, field.Invalid(specPath.Child("progressDeadlineSeconds"), p, "must be greater than minReadySeconds"))
		}
	}
	return allErrs
}

// validateStrategy mirrors ValidateDeploymentStrategy and ValidateRollingUpdateDeployment.
func validateStrategy(s *appsv1.DeploymentStrategy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.RollingUpdate != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if s.RollingUpdate == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("rollingUpdate"), "this should be defaulted and never be nil"))
			break
		}
		ru := fldPath.Child("rollingUpdate")
		allErrs = append(allErrs, validateIntOrPercent(s.RollingUpdate.MaxUnavailable, ru.Child("maxUnavailable"))...)
		allErrs = append(allErrs, validateIntOrPercent(s.RollingUpdate.MaxSurge, ru.Child("maxSurge"))...)
		if isZero(s.RollingUpdate.MaxUnavailable) && isZero(s.RollingUpdate.MaxSurge) {
			allErrs = append(allErrs, field.Invalid(ru.Child("maxUnavailable"), s.RollingUpdate.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
		if v := s.RollingUpdate.MaxUnavailable; v != nil && v.Type == intstr.String {
			if pct, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false); err == nil && pct > 100 {
				allErrs = append(allErrs, field.Invalid(ru.Child("maxUnavailable"), v.String(), "must not be greater than 100%"))
			}
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), s.Type,
			[]string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	return allErrs
}

// validateIntOrPercent accepts a non-negative integer or a percentage like "25%".
func validateIntOrPercent(v *intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	if v.Type == intstr.String {
		if _, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false); err != nil {
			return field.ErrorList{field.Invalid(fldPath, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")}
		}
	}
	n, _ := intstr.GetScaledValueFromIntOrPercent(v, 100, false)
	return workloadvalidation.ValidateNonnegative(int64(n), fldPath)
}

func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false)
	return err == nil && n == 0
}

// ValidateUpdate checks an update: a valid Deployment whose selector did not change.
// Mirrors ValidateDeploymentUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newD, oldD := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newD.ObjectMeta, &oldD.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateSpec(&newD.Spec, field.NewPath("spec"))...)
	return append(allErrs, workloadvalidation.ValidateSelectorUnchanged(newD.Spec.Selector, oldD.Spec.Selector, field.NewPath("spec"))...)
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return nil, nil, fmt.Errorf("not a deployment: %T", obj)
	}
	return labels.Set(d.Labels), registry.ObjectMetaFieldsSet(&d.ObjectMeta, true), nil
}

// TableColumns are NAME READY UP-TO-DATE AVAILABLE AGE, and wide CONTAINERS IMAGES
// SELECTOR. Mirrors printDeployment.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		{Name: "Up-to-date", Type: "integer", Description: "Total number of non-terminated pods targeted by this deployment that have the desired template spec."},
		{Name: "Available", Type: "integer", Description: "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."},
	}
}

// TableRow prints one Deployment: READY is readyReplicas/spec.replicas.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	d := obj.(*appsv1.Deployment)
	names, images := pod.ContainerCells(d.Spec.Template.Spec.Containers)
	return []interface{}{
		d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 0)),
		int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas),
		registry.TranslateTimestampSince(d.CreationTimestamp),
		names, images, metav1.FormatLabelSelector(d.Spec.Selector),
	}
}

// PrepareForUpdate keeps the stored spec and labels; annotations may change here, as
// in kube: the deployment controller writes the revision annotation with the status,
// without bumping the generation. Mirrors deploymentStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newD, oldD := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	newD.Spec = oldD.Spec
	newD.Labels = oldD.Labels
}

// ValidateUpdate checks the status counts. Mirrors ValidateDeploymentStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newD, oldD := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newD.ObjectMeta, &oldD.ObjectMeta, field.NewPath("metadata"))
	st, p := newD.Status, field.NewPath("status")
	for name, v := range map[string]int32{"replicas": st.Replicas, "updatedReplicas": st.UpdatedReplicas,
		"readyReplicas": st.ReadyReplicas, "availableReplicas": st.AvailableReplicas, "unavailableReplicas": st.UnavailableReplicas} {
		allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(int64(v), p.Child(name))...)
	}
	allErrs = append(allErrs, workloadvalidation.ValidateNonnegative(st.ObservedGeneration, p.Child("observedGeneration"))...)
	if st.UpdatedReplicas > st.Replicas {
		allErrs = append(allErrs, field.Invalid(p.Child("updatedReplicas"), st.UpdatedReplicas, "cannot be greater than status.replicas"))
	}
	if st.AvailableReplicas > st.Replicas {
		allErrs = append(allErrs, field.Invalid(p.Child("availableReplicas"), st.AvailableReplicas, "cannot be greater than status.replicas"))
	}
	return allErrs
}

// Scalable reads and writes a Deployment's replica counts for deployments/scale.
type Scalable struct{}

// Replicas returns spec.replicas, status.replicas and the selector.
func (Scalable) Replicas(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
	d := obj.(*appsv1.Deployment)
	return ptr.Deref(d.Spec.Replicas, 0), d.Status.Replicas, d.Spec.Selector
}

// SetReplicas sets spec.replicas.
func (Scalable) SetReplicas(obj runtime.Object, replicas int32) {
	obj.(*appsv1.Deployment).Spec.Replicas = &replicas
}
