// Package podtemplate is the core/v1 podtemplates resource: a named pod template kept for
// clients to read. Mirrors k8s.io/kubernetes/pkg/registry/core/podtemplate.
package podtemplate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/internal/apis/core/defaults"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Descriptor serves v1 podtemplates. Objects live at /registry/podtemplates/<namespace>/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "podtemplates",
	SingularName: "podtemplate",
	Kind:         "PodTemplate",
	NewFunc:      func() runtime.Object { return &corev1.PodTemplate{} },
	NewListFunc:  func() runtime.Object { return &corev1.PodTemplateList{} },
	Strategy:     Strategy{},
}

// Strategy is the podtemplates strategy. Mirrors podTemplateStrategy.
type Strategy struct{}

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate sets generation 1 and fills the template's pod spec defaults, as
// kube's defaulting of a decoded PodTemplate does.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	t := obj.(*corev1.PodTemplate)
	t.Generation = 1
	defaults.SetPodSpecDefaults(&t.Template.Spec)
}

// PrepareForUpdate fills defaults and bumps the generation when the template changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newT, oldT := obj.(*corev1.PodTemplate), old.(*corev1.PodTemplate)
	defaults.SetPodSpecDefaults(&newT.Template.Spec)
	if !apiequality.Semantic.DeepEqual(newT.Template, oldT.Template) {
		newT.Generation = oldT.Generation + 1
	}
}

// Validate checks metadata and the template as any pod template ("template.spec.containers:
// Required value" for an empty one). Mirrors ValidatePodTemplate.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	t := obj.(*corev1.PodTemplate)
	allErrs := apivalidation.ValidateObjectMeta(&t.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, corevalidation.ValidatePodTemplateSpec(&t.Template, field.NewPath("template"))...)
}

// ValidateUpdate checks the metadata update rules and the new template. Mirrors
// ValidatePodTemplateUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newT, oldT := obj.(*corev1.PodTemplate), old.(*corev1.PodTemplate)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&newT.ObjectMeta, &oldT.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, corevalidation.ValidatePodTemplateSpec(&newT.Template, field.NewPath("template"))...)
}

// GetAttrs returns labels and metadata.name/metadata.namespace, kube's podtemplate field
// selectors.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	t, ok := obj.(*corev1.PodTemplate)
	if !ok {
		return nil, nil, fmt.Errorf("not a podtemplate: %T", obj)
	}
	return labels.Set(t.Labels), registry.ObjectMetaFieldsSet(&t.ObjectMeta, true), nil
}

// TableColumns are NAME CONTAINERS IMAGES POD LABELS. Mirrors the printer's
// podTemplateColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Containers", Type: "string", Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Description: "Images referenced by each container in the template."},
		{Name: "Pod Labels", Type: "string", Description: "The labels for the pod template."},
	}
}

// TableRow prints one PodTemplate. Mirrors printPodTemplate.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	t := obj.(*corev1.PodTemplate)
	names, images := pod.ContainerCells(t.Template.Spec.Containers)
	return []interface{}{t.Name, names, images, labels.FormatLabels(t.Template.Labels)}
}
