// Package configmap is the core/v1 configmaps resource. Mirrors
// k8s.io/kubernetes/pkg/registry/core/configmap.
package configmap

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
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
)

// MaxSize is the largest total size of a ConfigMap's data and binaryData, in bytes
// (kube's corev1.MaxSecretSize, which ConfigMaps share: 1 MiB).
const MaxSize = 1 << 20

// Descriptor serves configmaps.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "configmaps",
	SingularName: "configmap",
	Kind:         "ConfigMap",
	ShortNames:   []string{"cm"},
	NewFunc:      func() runtime.Object { return &corev1.ConfigMap{} },
	NewListFunc:  func() runtime.Object { return &corev1.ConfigMapList{} },
	Strategy:     Strategy{},
}

// Strategy is the configmaps strategy: a ConfigMap is written whole by its user.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate changes nothing: a ConfigMap has no status.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate changes nothing.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata, that every key of data and binaryData is a valid ConfigMap
// key used once across both, and the 1 MiB limit. Mirrors ValidateConfigMap.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	cm := obj.(*corev1.ConfigMap)
	allErrs := apivalidation.ValidateObjectMeta(&cm.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	total := 0
	for key, value := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			allErrs = append(allErrs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(value)
	}
	for key, value := range cm.BinaryData {
		for _, msg := range validation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		total += len(value)
	}
	if total > MaxSize {
		allErrs = append(allErrs, field.TooLong(field.NewPath(""), "", MaxSize))
	}
	return allErrs
}

// ValidateUpdate adds the update rules: once `immutable` is true it stays true and
// data and binaryData no longer change. Mirrors ValidateConfigMapUpdate.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newCM, oldCM := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	allErrs := s.Validate(ctx, obj)
	allErrs = append(allErrs, apivalidation.ValidateObjectMetaUpdate(&newCM.ObjectMeta, &oldCM.ObjectMeta, field.NewPath("metadata"))...)
	if oldCM.Immutable != nil && *oldCM.Immutable {
		if newCM.Immutable == nil || !*newCM.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(newCM.Data, oldCM.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(newCM.BinaryData, oldCM.BinaryData) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("binaryData"), "field is immutable when `immutable` is set"))
		}
	}
	return allErrs
}

// GetAttrs returns labels and metadata.name/namespace, kube's configmap field selectors.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, nil, fmt.Errorf("not a configmap: %T", obj)
	}
	return labels.Set(cm.Labels), registry.ObjectMetaFieldsSet(&cm.ObjectMeta, true), nil
}

// TableColumns are NAME DATA AGE. Mirrors printConfigMap.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Data", Type: "integer", Description: "The number of data and binaryData items."},
		registry.AgeColumn,
	}
}

// TableRow prints one ConfigMap.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	cm := obj.(*corev1.ConfigMap)
	return []interface{}{cm.Name, int64(len(cm.Data) + len(cm.BinaryData)), registry.TranslateTimestampSince(cm.CreationTimestamp)}
}
