// Package pod is the pods resource: its strategy (defaulting, validation, field-selector
// attributes, table rows, graceful deletion), the status strategy for pods/status and the
// pods/binding subresource. Mirrors k8s.io/kubernetes/pkg/registry/core/pod.
package pod

import (
	"context"
	"fmt"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/internal/apis/core/defaults"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
	"skiff.dev/services/internal/tracing"
)

// Strategy is the pods strategy for the main resource. Mirrors podStrategy.
type Strategy struct{ Printer }

// StatusStrategy is the strategy for pods/status: only status may change. Mirrors
// podStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy               = Strategy{}
	_ registry.GracefulDeleteStrategy = Strategy{}
	_ registry.TablePrinter           = Strategy{}
)

// NamespaceScoped is true: pods live in namespaces.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate resets status to Pending with the pod's QoS class, fills defaults and
// stores the creating request's W3C traceparent in the annotation skiff.dev/traceparent,
// so the scheduler and the kubelet continue the request's trace (one Pod = one trace).
func (Strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	pod := obj.(*corev1.Pod)
	tracing.InjectTraceparent(ctx, pod)
	defaults.SetDefaults(pod)
	pod.Generation = 1
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: QOSClass(pod)}
}

// PrepareForUpdate keeps the stored status: the main resource cannot change it.
// The pod keeps its skiff.dev/traceparent, and the request's span links to the pod's
// trace: a later change to a pod is its own trace, joined to the pod's creation.
func (Strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	newPod.Status = oldPod.Status
	keepTraceparent(ctx, newPod, oldPod)
}

// keepTraceparent restores old's traceparent annotation on pod if an update dropped it,
// and links ctx's span to the pod's trace.
func keepTraceparent(ctx context.Context, pod, old *corev1.Pod) {
	if tp, ok := old.Annotations[tracing.TraceparentAnnotation]; ok {
		if _, kept := pod.Annotations[tracing.TraceparentAnnotation]; !kept {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[tracing.TraceparentAnnotation] = tp
		}
	}
	linkToPodTrace(ctx, old)
}

// linkToPodTrace links the span of ctx (the request) to pod's stored trace.
func linkToPodTrace(ctx context.Context, pod *corev1.Pod) {
	if sc := tracing.SpanContextFrom(pod); sc.IsValid() {
		trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: sc})
	}
}

// Validate checks a new pod. Mirrors ValidatePodCreate.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	pod := obj.(*corev1.Pod)
	allErrs := corevalidation.ValidatePod(pod)
	if len(pod.Spec.EphemeralContainers) > 0 {
		// They come later, through pods/ephemeralcontainers (kube's validatePodCreate).
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "ephemeralContainers"), "cannot be set on create"))
	}
	return allErrs
}

// ValidateUpdate allows only the mutable parts of a pod's spec to change. Mirrors
// ValidatePodUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return corevalidation.ValidatePodUpdate(obj.(*corev1.Pod), old.(*corev1.Pod))
}

// GetAttrs returns the pod's labels and selectable fields.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), ToSelectableFields(pod), nil
}

// IndexFields indexes pods by spec.nodeName: every kubelet watches only its own pods.
func (Strategy) IndexFields() []string { return []string{"spec.nodeName"} }

// ToSelectableFields returns the field set pods support in field selectors. Mirrors
// kube's PodToSelectableFields (pkg/registry/core/pod/strategy.go).
func ToSelectableFields(pod *corev1.Pod) fields.Set {
	podIPs := ""
	if len(pod.Status.PodIPs) > 0 {
		podIPs = pod.Status.PodIPs[0].IP
	}
	f := fields.Set{
		"spec.nodeName":            pod.Spec.NodeName,
		"spec.restartPolicy":       string(pod.Spec.RestartPolicy),
		"spec.schedulerName":       pod.Spec.SchedulerName,
		"spec.serviceAccountName":  pod.Spec.ServiceAccountName,
		"spec.hostNetwork":         fmt.Sprint(pod.Spec.HostNetwork),
		"status.phase":             string(pod.Status.Phase),
		"status.podIP":             podIPs,
		"status.podIPs":            podIPs,
		"status.nominatedNodeName": pod.Status.NominatedNodeName,
	}
	return registry.MergeFieldsSets(registry.ObjectMetaFieldsSet(&pod.ObjectMeta, true), f)
}

// CheckGracefulDelete decides the grace period: the request's, else the pod's
// terminationGracePeriodSeconds; zero for a pod never scheduled or already terminal, since
// no kubelet will stop it. Mirrors podStrategy.CheckGracefulDelete.
func (Strategy) CheckGracefulDelete(ctx context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	pod := obj.(*corev1.Pod)
	linkToPodTrace(ctx, pod)
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if options.GracePeriodSeconds != nil {
		grace = *options.GracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		grace = 0
	}
	if grace < 0 {
		grace = 1 // kube turns negative grace periods into 1 s
	}
	options.GracePeriodSeconds = &grace
	return grace > 0
}

// GetResetFields: the main resource keeps the stored status. Mirrors podStrategy.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetResetFields: pods/status keeps the stored spec, deletionTimestamp and owner
// references. Mirrors podStatusStrategy.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"),
		fieldpath.MakePathOrDie("metadata", "deletionTimestamp"),
		fieldpath.MakePathOrDie("metadata", "ownerReferences"),
	)}
}

// PrepareForCreate is never used on the status subresource.
func (StatusStrategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the stored spec: pods/status changes only status (and may not
// touch owner references).
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	newPod.Spec = oldPod.Spec
	newPod.OwnerReferences = oldPod.OwnerReferences
}

// ValidateUpdate checks the new status. Mirrors ValidatePodStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return corevalidation.ValidatePodStatusUpdate(obj.(*corev1.Pod), old.(*corev1.Pod))
}

// EphemeralContainersStrategy is the strategy for pods/ephemeralcontainers: only
// spec.ephemeralContainers may change, by additions. Mirrors
// podEphemeralContainersStrategy.
type EphemeralContainersStrategy struct{ Strategy }

// PrepareForUpdate keeps everything of the stored pod but its ephemeral containers,
// which it takes from the update, defaulted.
func (EphemeralContainersStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	pod := oldPod.DeepCopy()
	pod.Name, pod.Namespace, pod.ResourceVersion, pod.UID = newPod.Name, newPod.Namespace, newPod.ResourceVersion, newPod.UID
	pod.Spec.EphemeralContainers = newPod.Spec.EphemeralContainers
	for i := range pod.Spec.EphemeralContainers {
		defaults.SetContainerDefaults((*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	*newPod = *pod
}

// ValidateUpdate allows only new ephemeral containers. Mirrors
// ValidatePodEphemeralContainersUpdate.
func (EphemeralContainersStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return corevalidation.ValidatePodEphemeralContainersUpdate(obj.(*corev1.Pod), old.(*corev1.Pod))
}
