// Package apiservice is the apiregistration.k8s.io/v1 apiservices resource and its status
// subresource: each APIService names a group version and either serves it locally
// (spec.service unset: skiff's own built-in groups) or has the aggregator proxy it to a
// Service (an extension API server such as metrics-server). Validation is kube's own
// (k8s.io/kube-aggregator's ValidateAPIService, over the internal types it is written
// for); what an APIService makes served is package aggregator. Mirrors
// k8s.io/kube-aggregator/pkg/registry/apiservice.
package apiservice

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration/validation"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// Resource is apiregistration.k8s.io's apiservices.
var Resource = apiregistrationv1.Resource("apiservices")

// Descriptor serves apiregistration.k8s.io/v1 apiservices (category api-extensions) with
// apiservices/status, at /registry/apiregistration.k8s.io/apiservices/<name> (kube's
// key).
var Descriptor = registry.Descriptor{
	GroupVersion: apiregistrationv1.SchemeGroupVersion,
	Resource:     "apiservices",
	SingularName: "apiservice",
	Kind:         "APIService",
	Categories:   []string{"api-extensions"},
	KeyRoot:      "/registry/apiregistration.k8s.io/apiservices",
	NewFunc:      func() runtime.Object { return &apiregistrationv1.APIService{} },
	NewListFunc:  func() runtime.Object { return &apiregistrationv1.APIServiceList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "APIService", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the apiservices strategy: spec.service.port defaults to 443, status is
// cleared on create (a local APIService is Available from the start) and kept on update,
// and an update must name the resourceVersion it replaces. Mirrors apiServerStrategy.
type Strategy struct{}

// StatusStrategy is apiservices/status: only status changes. Mirrors
// apiServerStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.ResetFieldsStrategy         = Strategy{}
	_ registry.ResetFieldsStrategy         = StatusStrategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
	_ registry.TablePrinter                = Strategy{}
)

// NamespaceScoped is false: APIServices are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate applies kube's defaults and clears status; a local APIService is
// marked Available (reason Local) at once.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s := obj.(*apiregistrationv1.APIService)
	scheme.Scheme.Default(s)
	s.Status = apiregistrationv1.APIServiceStatus{}
	if s.Spec.Service == nil {
		helper.SetAPIServiceCondition(s, helper.NewLocalAvailableAPIServiceCondition())
	}
}

// PrepareForUpdate applies kube's defaults and keeps the stored status.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s := obj.(*apiregistrationv1.APIService)
	scheme.Scheme.Default(s)
	s.Status = *old.(*apiregistrationv1.APIService).Status.DeepCopy()
}

// AllowUnconditionalUpdate is false, as kube's: a PUT names the resourceVersion it
// replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apiregistration.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new APIService with kube's ValidateAPIService: the name is
// <version>.<group>, groupPriorityMinimum 1-20000, versionPriority 1-1000, a local one
// has no caBundle nor insecureSkipTLSVerify, a Service has a namespace, a name and a
// valid port, and caBundle and insecureSkipTLSVerify exclude each other.
func (Strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	internal, errs := toInternal(obj)
	if len(errs) > 0 {
		return errs
	}
	return validation.ValidateAPIService(ctx, internal)
}

// ValidateUpdate checks an update with kube's ValidateAPIServiceUpdate.
func (Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	internal, errs := toInternal(obj)
	if len(errs) > 0 {
		return errs
	}
	oldInternal, errs := toInternal(old)
	if len(errs) > 0 {
		return errs
	}
	return validation.ValidateAPIServiceUpdate(ctx, internal, oldInternal)
}

// GetAttrs returns labels and metadata.name, the one selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	s, ok := obj.(*apiregistrationv1.APIService)
	if !ok {
		return nil, nil, fmt.Errorf("not an APIService: %T", obj)
	}
	return labels.Set(s.Labels), registry.ObjectMetaFieldsSet(&s.ObjectMeta, false), nil
}

// TableColumns are NAME SERVICE AVAILABLE AGE, kube-aggregator's.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Service", Type: "string", Description: "The reference to the service that hosts this API endpoint."},
		{Name: "Available", Type: "string", Description: "Whether this service is available."},
		registry.AgeColumn,
	}
}

// TableRow prints one APIService: SERVICE is Local or namespace/name, AVAILABLE the
// Available condition's status, with its reason when not True ("False
// (MissingEndpoints)"), Unknown without one. Mirrors the apiservices REST's
// ConvertToTable.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	s := obj.(*apiregistrationv1.APIService)
	service := "Local"
	if s.Spec.Service != nil {
		service = s.Spec.Service.Namespace + "/" + s.Spec.Service.Name
	}
	available := string(apiregistrationv1.ConditionUnknown)
	if c := helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available); c != nil {
		available = string(c.Status)
		if c.Status != apiregistrationv1.ConditionTrue && c.Reason != "" {
			available = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
		}
	}
	return []interface{}{s.Name, service, available, registry.TranslateTimestampSince(s.CreationTimestamp)}
}

// toInternal converts a v1 APIService into the internal type kube's validation is
// written for.
func toInternal(obj runtime.Object) (*apiregistration.APIService, field.ErrorList) {
	out := &apiregistration.APIService{}
	if err := apiregistrationv1.Convert_v1_APIService_To_apiregistration_APIService(obj.(*apiregistrationv1.APIService), out, nil); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())}
	}
	return out, nil
}

// GetResetFields: apiservices/status keeps the stored spec and metadata.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"apiregistration.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))}
}

// PrepareForUpdate keeps the stored spec, labels, annotations, finalizers and owner
// references. Mirrors apiServerStatusStrategy.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, oldS := obj.(*apiregistrationv1.APIService), old.(*apiregistrationv1.APIService)
	s.Spec = oldS.Spec
	s.Labels, s.Annotations = oldS.Labels, oldS.Annotations
	s.Finalizers, s.OwnerReferences = oldS.Finalizers, oldS.OwnerReferences
}

// ValidateUpdate checks the status with kube's ValidateAPIServiceStatusUpdate: each
// condition's status is True, False or Unknown.
func (StatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	internal, errs := toInternal(obj)
	if len(errs) > 0 {
		return errs
	}
	oldInternal, errs := toInternal(old)
	if len(errs) > 0 {
		return errs
	}
	return validation.ValidateAPIServiceStatusUpdate(ctx, internal, oldInternal)
}
