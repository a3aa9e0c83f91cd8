// Package limitrange is the v1 limitranges resource: namespaced LimitRanges giving the
// default requests and limits the LimitRanger admission plugin sets on containers, and
// the min, max and limit/request ratio it enforces on containers, pods and claims.
// Mirrors k8s.io/kubernetes/pkg/registry/core/limitrange.
package limitrange

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	corevalidation "skiff.dev/services/internal/apis/core/validation"
)

// Descriptor serves v1 limitranges (kubectl: limitranges, limits), at
// /registry/limitranges/<namespace>/<name>. Its table is kube's for LimitRanges, NAME
// and CREATED AT: the default columns, so the strategy has no printer of its own.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "limitranges",
	SingularName: "limitrange",
	Kind:         "LimitRange",
	ShortNames:   []string{"limits"},
	NewFunc:      func() runtime.Object { return &corev1.LimitRange{} },
	NewListFunc:  func() runtime.Object { return &corev1.LimitRangeList{} },
	Strategy:     Strategy{},
}

// Strategy is the limitranges strategy: nothing is defaulted or cleared (a LimitRange
// has no status). Mirrors limitrangeStrategy.
type Strategy struct{}

var _ registry.Strategy = Strategy{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the LimitRange as sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the LimitRange as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks a new LimitRange (corevalidation.ValidateLimitRange).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return corevalidation.ValidateLimitRange(obj.(*corev1.LimitRange))
}

// ValidateUpdate checks the metadata update rules and the new LimitRange.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	lr, oldLR := obj.(*corev1.LimitRange), old.(*corev1.LimitRange)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&lr.ObjectMeta, &oldLR.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, corevalidation.ValidateLimitRange(lr)...)
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	lr, ok := obj.(*corev1.LimitRange)
	if !ok {
		return nil, nil, fmt.Errorf("not a LimitRange: %T", obj)
	}
	return labels.Set(lr.Labels), registry.ObjectMetaFieldsSet(&lr.ObjectMeta, true), nil
}
