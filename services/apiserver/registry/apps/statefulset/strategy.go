// Package statefulset is the apps/v1 statefulsets resource: its strategy (defaulting,
// validation, generation, kubectl's columns), statefulsets/status and statefulsets/scale.
// Mirrors k8s.io/kubernetes/pkg/registry/apps/statefulset and the StatefulSet checks of
// pkg/apis/apps/validation.
package statefulset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
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
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
)

// Strategy is the statefulsets strategy. Mirrors statefulSetStrategy.
type Strategy struct{}

// StatusStrategy is the strategy of statefulsets/status: only status changes. Mirrors
// statefulSetStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy            = Strategy{}
	_ registry.TablePrinter        = Strategy{}
	_ registry.ResetFieldsStrategy = Strategy{}
	_ registry.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// SetDefaults fills what apps/v1 defaults: podManagementPolicy OrderedReady,
// updateStrategy RollingUpdate with partition 0 (a RollingUpdate strategy given without
// a partition gets 0 too), persistentVolumeClaimRetentionPolicy Retain/Retain, replicas 1,
// revisionHistoryLimit 10, the pod template's defaults, and on each volume claim template
// volumeMode Filesystem and status.phase Pending. rollingUpdate.maxUnavailable is kept
// as given and not defaulted (kube's MaxUnavailableStatefulSet, alpha in 1.32, defaults
// it to 1 only when enabled; unset means 1 to the controller either way). Mirrors
// SetDefaults_StatefulSet, SetDefaults_PersistentVolumeClaim and
// SetDefaults_PersistentVolumeClaimSpec (apps/v1, core/v1).
func SetDefaults(set *appsv1.StatefulSet) {
	spec := &set.Spec
	if spec.PodManagementPolicy == "" {
		spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	if spec.UpdateStrategy.Type == "" {
		spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if spec.UpdateStrategy.RollingUpdate == nil {
			spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && spec.UpdateStrategy.RollingUpdate != nil &&
		spec.UpdateStrategy.RollingUpdate.Partition == nil {
		spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(int32(0))
	}
	if spec.PersistentVolumeClaimRetentionPolicy == nil {
		spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	if spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted == "" {
		spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if spec.PersistentVolumeClaimRetentionPolicy.WhenScaled == "" {
		spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if spec.Replicas == nil {
		spec.Replicas = ptr.To(int32(1))
	}
	if spec.RevisionHistoryLimit == nil {
		spec.RevisionHistoryLimit = ptr.To(int32(10))
	}
	defaults.SetPodSpecDefaults(&spec.Template.Spec)
	for i := range spec.VolumeClaimTemplates {
		claim := &spec.VolumeClaimTemplates[i]
		if claim.Spec.VolumeMode == nil {
			claim.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}
		if claim.Status.Phase == "" {
			claim.Status.Phase = corev1.ClaimPending
		}
	}
}

// PrepareForCreate clears status, sets generation 1 and fills defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	set := obj.(*appsv1.StatefulSet)
	set.Status = appsv1.StatefulSetStatus{}
	set.Generation = 1
	SetDefaults(set)
}

// PrepareForUpdate keeps the stored status, fills defaults, and bumps the generation
// when the spec changes, so status.observedGeneration tells whether the controller has
// seen the change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newSet, oldSet := obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet)
	newSet.Status = oldSet.Status
	SetDefaults(newSet)
	if !apiequality.Semantic.DeepEqual(newSet.Spec, oldSet.Spec) {
		newSet.Generation = oldSet.Generation + 1
	}
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apps/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new StatefulSet (see ValidateStatefulSet).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateStatefulSet(obj.(*appsv1.StatefulSet))
}

// ValidateUpdate checks an update (see ValidateStatefulSetUpdate).
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return ValidateStatefulSetUpdate(obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet))
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	set, ok := obj.(*appsv1.StatefulSet)
	if !ok {
		return nil, nil, fmt.Errorf("not a statefulset: %T", obj)
	}
	return labels.Set(set.Labels), registry.ObjectMetaFieldsSet(&set.ObjectMeta, true), nil
}

// TableColumns are NAME READY AGE, and wide CONTAINERS IMAGES. Mirrors the printers'
// statefulSetColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
		registry.AgeColumn,
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
	}
}

// TableRow prints one StatefulSet: READY is status.readyReplicas/spec.replicas. Mirrors
// printStatefulSet.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	set := obj.(*appsv1.StatefulSet)
	names, images := pod.ContainerCells(set.Spec.Template.Spec.Containers)
	return []interface{}{
		set.Name, fmt.Sprintf("%d/%d", set.Status.ReadyReplicas, ptr.Deref(set.Spec.Replicas, 0)),
		registry.TranslateTimestampSince(set.CreationTimestamp), names, images,
	}
}

// GetResetFields: statefulsets/status keeps the stored spec.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apps/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec. Mirrors statefulSetStatusStrategy.PrepareForUpdate.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*appsv1.StatefulSet).Spec = old.(*appsv1.StatefulSet).Spec
}

// ValidateUpdate checks a status write (see ValidateStatefulSetStatusUpdate).
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return ValidateStatefulSetStatusUpdate(obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet))
}

// Scalable reads and writes a StatefulSet's replica counts for statefulsets/scale.
type Scalable struct{}

// Replicas returns spec.replicas, status.replicas and the selector.
func (Scalable) Replicas(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
	set := obj.(*appsv1.StatefulSet)
	return ptr.Deref(set.Spec.Replicas, 0), set.Status.Replicas, set.Spec.Selector
}

// SetReplicas sets spec.replicas.
func (Scalable) SetReplicas(obj runtime.Object, replicas int32) {
	obj.(*appsv1.StatefulSet).Spec.Replicas = &replicas
}

// objectMetaUpdate is apivalidation.ValidateObjectMetaUpdate at metadata.
func objectMetaUpdate(newMeta, oldMeta *metav1.ObjectMeta) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(newMeta, oldMeta, field.NewPath("metadata"))
}
