// Package lease is the coordination.k8s.io/v1 leases resource that kubelets renew as
// heartbeats. Mirrors k8s.io/kubernetes/pkg/registry/coordination/lease.
package lease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
)

// Descriptor serves leases.
var Descriptor = registry.Descriptor{
	GroupVersion: coordinationv1.SchemeGroupVersion,
	Resource:     "leases",
	SingularName: "lease",
	Kind:         "Lease",
	NewFunc:      func() runtime.Object { return &coordinationv1.Lease{} },
	NewListFunc:  func() runtime.Object { return &coordinationv1.LeaseList{} },
	Strategy:     Strategy{},
}

// Strategy is the leases strategy.
type Strategy struct{}

// NamespaceScoped is true.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate keeps the lease as sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the lease as sent.
func (Strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

// Validate checks metadata and that durations are positive.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	l := obj.(*coordinationv1.Lease)
	allErrs := apivalidation.ValidateObjectMeta(&l.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if t := l.Spec.LeaseTransitions; t != nil && *t < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "leaseTransitions"), *t, "must be greater than or equal to 0"))
	}
	return allErrs
}

// ValidateUpdate checks an update like a create, plus the metadata update rules.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	allErrs := s.Validate(ctx, obj)
	return append(allErrs, apivalidation.ValidateObjectMetaUpdate(&obj.(*coordinationv1.Lease).ObjectMeta, &old.(*coordinationv1.Lease).ObjectMeta, field.NewPath("metadata"))...)
}

// GetAttrs returns labels and metadata.name/metadata.namespace.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, nil, fmt.Errorf("not a lease: %T", obj)
	}
	return labels.Set(l.Labels), registry.ObjectMetaFieldsSet(&l.ObjectMeta, true), nil
}

// TableColumns are NAME HOLDER AGE. Mirrors printLease.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Holder", Type: "string", Description: "The holder of the lease."},
		registry.AgeColumn,
	}
}

// TableRow prints one lease.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	l := obj.(*coordinationv1.Lease)
	holder := "<unknown>"
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return []interface{}{l.Name, holder, registry.TranslateTimestampSince(l.CreationTimestamp)}
}
