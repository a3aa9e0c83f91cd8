// Package validatingwebhookconfiguration is the admissionregistration.k8s.io/v1
// validatingwebhookconfigurations resource: cluster-scoped ValidatingWebhookConfigurations,
// each a list of webhooks the apiserver calls to accept or refuse writes (see
// skiff.dev/services/apiserver/admission/webhook). Mirrors
// k8s.io/kubernetes/pkg/registry/admissionregistration/validatingwebhookconfiguration.
package validatingwebhookconfiguration

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration"
)

// Descriptor serves admissionregistration.k8s.io/v1 validatingwebhookconfigurations
// (kubectl: validatingwebhookconfigurations, validatingwebhookconfiguration), at
// /registry/validatingwebhookconfigurations/<name>.
var Descriptor = registry.Descriptor{
	GroupVersion: admissionregistrationv1.SchemeGroupVersion,
	Resource:     "validatingwebhookconfigurations",
	SingularName: "validatingwebhookconfiguration",
	Kind:         "ValidatingWebhookConfiguration",
	Categories:   []string{"api-extensions"},
	NewFunc:      func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
	NewListFunc:  func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
	Strategy:     Strategy{},
}

// Strategy is the validatingwebhookconfigurations strategy: kube's defaults are filled,
// the generation counts changes of webhooks, and an update must name the
// resourceVersion it replaces. Mirrors validatingWebhookConfigurationStrategy.
type Strategy struct{}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: webhook configurations are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate sets generation 1 and fills the defaults
// (admissionregistration.SetDefaultsValidating).
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	c.Generation = 1
	admissionregistration.SetDefaultsValidating(c)
}

// PrepareForUpdate fills the defaults and bumps the generation when the webhooks change.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	c, oldC := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration), old.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	admissionregistration.SetDefaultsValidating(c)
	if !apiequality.Semantic.DeepEqual(c.Webhooks, oldC.Webhooks) {
		c.Generation = oldC.Generation + 1
	}
}

// Validate checks a new configuration
// (admissionregistration.ValidateValidatingWebhookConfiguration).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return admissionregistration.ValidateValidatingWebhookConfiguration(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration))
}

// ValidateUpdate checks an update
// (admissionregistration.ValidateValidatingWebhookConfigurationUpdate).
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return admissionregistration.ValidateValidatingWebhookConfigurationUpdate(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration),
		old.(*admissionregistrationv1.ValidatingWebhookConfiguration))
}

// AllowUnconditionalUpdate is false, as in kube: a writer proves it read what it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	c, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	if !ok {
		return nil, nil, fmt.Errorf("not a ValidatingWebhookConfiguration: %T", obj)
	}
	return labels.Set(c.Labels), registry.ObjectMetaFieldsSet(&c.ObjectMeta, false), nil
}

// TableColumns are NAME WEBHOOKS AGE.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return admissionregistration.TableColumns()
}

// TableRow prints one configuration: WEBHOOKS is how many it has.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	c := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	return []interface{}{c.Name, int64(len(c.Webhooks)), registry.TranslateTimestampSince(c.CreationTimestamp)}
}
