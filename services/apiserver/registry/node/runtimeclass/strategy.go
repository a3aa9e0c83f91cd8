// Package runtimeclass is the node.k8s.io/v1 runtimeclasses resource: cluster-scoped
// RuntimeClasses, each naming the CRI runtime handler a pod of that class runs with, its
// pod overhead and the scheduling constraints its pods get (the RuntimeClass admission
// plugin applies both to pods). Mirrors k8s.io/kubernetes/pkg/registry/node/runtimeclass
// and ValidateRuntimeClass in pkg/apis/node/validation.
package runtimeclass

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Descriptor serves node.k8s.io/v1 runtimeclasses (kubectl: runtimeclasses,
// runtimeclass), at /registry/runtimeclasses/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: nodev1.SchemeGroupVersion,
	Resource:     "runtimeclasses",
	SingularName: "runtimeclass",
	Kind:         "RuntimeClass",
	NewFunc:      func() runtime.Object { return &nodev1.RuntimeClass{} },
	NewListFunc:  func() runtime.Object { return &nodev1.RuntimeClassList{} },
	Strategy:     Strategy{},
}

// Strategy is the runtimeclasses strategy: nothing is defaulted or cleared, the handler
// is immutable, and an update must name the resourceVersion it replaces. Mirrors kube's
// runtimeclass strategy.
type Strategy struct{}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: RuntimeClasses are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate keeps the RuntimeClass as sent: it has no status.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the RuntimeClass as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks a new RuntimeClass (see ValidateRuntimeClass).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateRuntimeClass(obj.(*nodev1.RuntimeClass))
}

// ValidateUpdate checks the new RuntimeClass and that its handler did not change.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	rc, oldRC := obj.(*nodev1.RuntimeClass), old.(*nodev1.RuntimeClass)
	allErrs := ValidateRuntimeClass(rc)
	return append(allErrs, ValidateRuntimeClassUpdate(rc, oldRC)...)
}

// AllowUnconditionalUpdate is false, as kube's: an update without a resourceVersion is a
// 422.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	rc, ok := obj.(*nodev1.RuntimeClass)
	if !ok {
		return nil, nil, fmt.Errorf("not a RuntimeClass: %T", obj)
	}
	return labels.Set(rc.Labels), registry.ObjectMetaFieldsSet(&rc.ObjectMeta, false), nil
}

// TableColumns are NAME HANDLER AGE. Mirrors printRuntimeClass.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Handler", Type: "string", Description: "RuntimeClass Handler"},
		registry.AgeColumn,
	}
}

// TableRow prints one RuntimeClass.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	rc := obj.(*nodev1.RuntimeClass)
	return []interface{}{rc.Name, rc.Handler, registry.TranslateTimestampSince(rc.CreationTimestamp)}
}

// ValidateRuntimeClass checks a RuntimeClass: metadata (a DNS subdomain name), a handler
// that is a DNS label, a valid overhead.podFixed (see corevalidation.ValidateOverhead),
// and scheduling's nodeSelector (labels) and tolerations (valid, no two alike). Field
// paths are kube's, scheduling.tolerations.tolerations[i] included. Mirrors
// ValidateRuntimeClass.
func ValidateRuntimeClass(rc *nodev1.RuntimeClass) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&rc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	for _, msg := range apivalidation.NameIsDNSLabel(rc.Handler, false) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("handler"), rc.Handler, msg))
	}
	if rc.Overhead != nil {
		allErrs = append(allErrs, corevalidation.ValidateOverhead(rc.Overhead.PodFixed, field.NewPath("overhead"))...)
	}
	if s := rc.Scheduling; s != nil {
		fldPath := field.NewPath("scheduling")
		if s.NodeSelector != nil {
			allErrs = append(allErrs, metav1validation.ValidateLabels(s.NodeSelector, fldPath.Child("nodeSelector"))...)
		}
		allErrs = append(allErrs, validateTolerations(s.Tolerations, fldPath.Child("tolerations"))...)
	}
	return allErrs
}

// validateTolerations checks tolerations as a pod's and refuses two with the same key,
// operator, value and effect. Mirrors the node validation's validateTolerations, whose
// per-toleration errors sit under fldPath.tolerations.
func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	allErrs := corevalidation.ValidateTolerations(tolerations, fldPath.Child("tolerations"))
	seen := map[corev1.Toleration]bool{}
	for i, t := range tolerations {
		key := corev1.Toleration{Key: t.Key, Operator: t.Operator, Value: t.Value, Effect: t.Effect}
		if seen[key] {
			allErrs = append(allErrs, field.Duplicate(fldPath.Index(i), t))
		}
		seen[key] = true
	}
	return allErrs
}

// ValidateRuntimeClassUpdate checks the metadata update rules and that the handler is
// unchanged. Mirrors ValidateRuntimeClassUpdate.
func ValidateRuntimeClassUpdate(rc, old *nodev1.RuntimeClass) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, apivalidation.ValidateImmutableField(rc.Handler, old.Handler, field.NewPath("handler"))...)
}
