// Package ingressclass is the networking.k8s.io/v1 ingressclasses resource: cluster-
// scoped IngressClasses, each naming the controller that implements Ingresses of that
// class and, optionally, a parameters object. API only: skiff runs no ingress
// controller. Mirrors k8s.io/kubernetes/pkg/registry/networking/ingressclass and
// ValidateIngressClass in pkg/apis/networking/validation.
package ingressclass

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/networking/ingress"
)

// Descriptor serves networking.k8s.io/v1 ingressclasses (kubectl: ingressclasses,
// ingressclass), at /registry/ingressclasses/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: networkingv1.SchemeGroupVersion,
	Resource:     "ingressclasses",
	SingularName: "ingressclass",
	Kind:         "IngressClass",
	NewFunc:      func() runtime.Object { return &networkingv1.IngressClass{} },
	NewListFunc:  func() runtime.Object { return &networkingv1.IngressClassList{} },
	Strategy:     Strategy{},
}

// maxControllerLen is the longest spec.controller kube accepts.
const maxControllerLen = 250

// Strategy is the ingressclasses strategy: parameters.scope defaults to Cluster, the
// generation counts spec changes, the controller is immutable. Mirrors
// ingressClassStrategy.
type Strategy struct{}

var (
	_ registry.Strategy     = Strategy{}
	_ registry.TablePrinter = Strategy{}
)

// NamespaceScoped is false: IngressClasses are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// SetDefaults sets parameters.scope to Cluster when parameters name none. Mirrors
// SetDefaults_IngressClass.
func SetDefaults(ic *networkingv1.IngressClass) {
	if p := ic.Spec.Parameters; p != nil && p.Scope == nil {
		p.Scope = ptr.To(networkingv1.IngressClassParametersReferenceScopeCluster)
	}
}

// PrepareForCreate sets generation 1 and the defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ic := obj.(*networkingv1.IngressClass)
	ic.Generation = 1
	SetDefaults(ic)
}

// PrepareForUpdate fills the defaults and bumps the generation when the spec changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	ic, oldIC := obj.(*networkingv1.IngressClass), old.(*networkingv1.IngressClass)
	SetDefaults(ic)
	if !apiequality.Semantic.DeepEqual(ic.Spec, oldIC.Spec) {
		ic.Generation = oldIC.Generation + 1
	}
}

// Validate checks a new IngressClass (see ValidateIngressClass).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateIngressClass(obj.(*networkingv1.IngressClass))
}

// ValidateUpdate checks the metadata update, that spec.controller did not change and
// the new IngressClass. Mirrors ValidateIngressClassUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	ic, oldIC := obj.(*networkingv1.IngressClass), old.(*networkingv1.IngressClass)
	allErrs := apivalidation.ValidateObjectMetaUpdate(&ic.ObjectMeta, &oldIC.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(ic.Spec.Controller, oldIC.Spec.Controller, field.NewPath("spec", "controller"))...)
	return append(allErrs, ValidateIngressClass(ic)...)
}

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ic, ok := obj.(*networkingv1.IngressClass)
	if !ok {
		return nil, nil, fmt.Errorf("not an IngressClass: %T", obj)
	}
	return labels.Set(ic.Labels), registry.ObjectMetaFieldsSet(&ic.ObjectMeta, false), nil
}

// TableColumns are NAME CONTROLLER PARAMETERS AGE. Mirrors the printer's
// ingressClassColumnDefinitions.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Controller", Type: "string", Description: "Controller that is responsible for handling this class"},
		{Name: "Parameters", Type: "string", Description: "A reference to a resource with additional parameters"},
		registry.AgeColumn,
	}
}

// TableRow prints one IngressClass: PARAMETERS is kind[.apiGroup]/name or <none>.
// Mirrors printIngressClass.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	ic := obj.(*networkingv1.IngressClass)
	parameters := "<none>"
	if p := ic.Spec.Parameters; p != nil {
		parameters = p.Kind
		if p.APIGroup != nil {
			parameters += "." + *p.APIGroup
		}
		parameters += "/" + p.Name
	}
	return []interface{}{ic.Name, ic.Spec.Controller, parameters, registry.TranslateTimestampSince(ic.CreationTimestamp)}
}

// ValidateIngressClass checks an IngressClass: metadata (a DNS subdomain name), a
// controller that is a domain-prefixed path of at most 250 characters, and parameters
// (see validateParameters). Mirrors ValidateIngressClass.
func ValidateIngressClass(ic *networkingv1.IngressClass) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&ic.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	specPath := field.NewPath("spec")
	if len(ic.Spec.Controller) > maxControllerLen {
		allErrs = append(allErrs, field.TooLong(specPath.Child("controller"), "", maxControllerLen))
	}
	allErrs = append(allErrs, validation.IsDomainPrefixedPath(specPath.Child("controller"), ic.Spec.Controller)...)
	return append(allErrs, validateParameters(ic.Spec.Parameters, specPath.Child("parameters"))...)
}

// validateParameters: apiGroup, kind and name as a resource backend's; scope required,
// Cluster or Namespace; a namespace (a DNS label) required with Namespace scope and
// forbidden with Cluster. Mirrors validateIngressClassParametersReference.
func validateParameters(p *networkingv1.IngressClassParametersReference, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	allErrs := ingress.ValidateTypedLocalObjectReference(&corev1.TypedLocalObjectReference{APIGroup: p.APIGroup, Kind: p.Kind, Name: p.Name}, fldPath)
	if p.Scope == nil {
		return append(allErrs, field.Required(fldPath.Child("scope"), ""))
	}
	switch *p.Scope {
	case networkingv1.IngressClassParametersReferenceScopeNamespace:
		if p.Namespace == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("namespace"), "`parameters.scope` is set to 'Namespace'"))
		} else {
			for _, msg := range apivalidation.ValidateNamespaceName(*p.Namespace, false) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("namespace"), *p.Namespace, msg))
			}
		}
	case networkingv1.IngressClassParametersReferenceScopeCluster:
		if p.Namespace != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("namespace"), "`parameters.scope` is set to 'Cluster'"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("scope"), *p.Scope,
			[]string{networkingv1.IngressClassParametersReferenceScopeCluster, networkingv1.IngressClassParametersReferenceScopeNamespace}))
	}
	return allErrs
}
