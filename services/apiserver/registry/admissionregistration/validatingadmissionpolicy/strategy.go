// Package validatingadmissionpolicy is the admissionregistration.k8s.io/v1
// validatingadmissionpolicies resource and validatingadmissionpolicies/status:
// cluster-scoped ValidatingAdmissionPolicies, CEL validations that bindings put in force
// on writes (see skiff.dev/services/apiserver/admission/policy); the apiserver's policy
// status controller writes status.typeChecking and status.observedGeneration. Mirrors
// k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicy.
package validatingadmissionpolicy

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
	"skiff.dev/services/apiserver/registry/rest"
)

// Resource is the resource's group and name.
var Resource = admissionregistrationv1.Resource("validatingadmissionpolicies")

// NewDescriptor serves admissionregistration.k8s.io/v1 validatingadmissionpolicies with
// validatingadmissionpolicies/status, at /registry/validatingadmissionpolicies/<name>.
// authorizer checks that whoever sets a paramKind may read its objects; nil skips the
// check.
func NewDescriptor(authorizer authorizer.UnconditionalAuthorizer) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: admissionregistrationv1.SchemeGroupVersion,
		Resource:     Resource.Resource,
		SingularName: "validatingadmissionpolicy",
		Kind:         "ValidatingAdmissionPolicy",
		Categories:   []string{"api-extensions"},
		NewFunc:      func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		NewListFunc:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, stores registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return store.WithStrategy(Strategy{Authorizer: authorizer, Resolver: StoreResolver{Stores: stores}}), map[string]registry.Subresource{
				"status": {Kind: "ValidatingAdmissionPolicy", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
			}, nil
		},
	}
}

// ResourceResolver finds the resource serving a kind, as kube's
// registry/admissionregistration/resolver does.
type ResourceResolver interface {
	Resolve(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error)
}

// StoreResolver resolves the kinds of the built-in resources: the kind's guessed plural,
// when a Store of that resource serves the kind. Custom resources are not resolved, so
// a paramKind of a custom resource is authorized as every resource of its group
// version.
type StoreResolver struct{ Stores registry.Stores }

// Resolve implements ResourceResolver.
func (r StoreResolver) Resolve(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	if s := r.Stores.Store(plural.GroupResource()); s != nil && s.Kind == gvk.Kind {
		return plural, nil
	}
	return schema.GroupVersionResource{}, fmt.Errorf("no resource serves %v", gvk)
}

// Strategy is the validatingadmissionpolicies strategy: kube's defaults are filled,
// status is cleared on create and kept on update, the generation counts spec changes,
// an update must name the resourceVersion it replaces, and a paramKind may be set only
// by whoever may get every object of its kind. Mirrors
// validatingAdmissionPolicyStrategy.
type Strategy struct {
	// Authorizer checks the paramKind; nil skips the check (in-process writers).
	Authorizer authorizer.UnconditionalAuthorizer
	// Resolver names the resource of the paramKind; nil authorizes every resource of
	// its group version.
	Resolver ResourceResolver
}

// StatusStrategy is the strategy of validatingadmissionpolicies/status: only the status
// changes. Mirrors validatingAdmissionPolicyStatusStrategy.
type StatusStrategy struct{ Strategy }

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
	_ registry.ResetFieldsStrategy         = Strategy{}
	_ registry.ResetFieldsStrategy         = StatusStrategy{}
)

// NamespaceScoped is false: policies are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate clears status, sets generation 1 and fills the defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	p.Generation = 1
	admissionregistration.SetDefaultsValidatingAdmissionPolicy(p)
}

// PrepareForUpdate fills the defaults, keeps the stored status and bumps the generation
// when the spec changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	admissionregistration.SetDefaultsValidatingAdmissionPolicy(p)
	p.Status = oldP.Status
	if !apiequality.Semantic.DeepEqual(p.Spec, oldP.Spec) {
		p.Generation = oldP.Generation + 1
	}
}

// GetResetFields: the main resource keeps the stored status.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"admissionregistration.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// Validate checks a new policy (admissionregistration.ValidateValidatingAdmissionPolicy)
// and, when it is well formed, that the user may read its paramKind: a 422 Forbidden
// error at spec.paramKind otherwise.
func (s Strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	errs := admissionregistration.ValidateValidatingAdmissionPolicy(p)
	if len(errs) == 0 {
		if err := s.authorize(ctx, p); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "paramKind"), err.Error()))
		}
	}
	return errs
}

// ValidateUpdate checks an update
// (admissionregistration.ValidateValidatingAdmissionPolicyUpdate) and, when the
// paramKind changes, that the user may read the new one.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	errs := admissionregistration.ValidateValidatingAdmissionPolicyUpdate(p, oldP)
	if len(errs) == 0 && (oldP.Spec.ParamKind == nil || p.Spec.ParamKind == nil || *oldP.Spec.ParamKind != *p.Spec.ParamKind) {
		if err := s.authorize(ctx, p); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "paramKind"), err.Error()))
		}
	}
	return errs
}

// authorize requires that the request's user may get every object of the paramKind
// (system:masters may anyway). Mirrors validatingAdmissionPolicyStrategy.authorize.
func (s Strategy) authorize(ctx context.Context, p *admissionregistrationv1.ValidatingAdmissionPolicy) error {
	paramKind := p.Spec.ParamKind
	if s.Authorizer == nil || paramKind == nil || rbacregistry.EscalationAllowed(ctx) {
		return nil
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return fmt.Errorf("cannot identify user to authorize read access to paramKind resources")
	}
	// Every group, version and resource unless the paramKind narrows them.
	resource, group, version := "*", "*", "*"
	if gv, err := schema.ParseGroupVersion(paramKind.APIVersion); err == nil {
		group, version = gv.Group, gv.Version
		if s.Resolver != nil {
			if gvr, err := s.Resolver.Resolve(gv.WithKind(paramKind.Kind)); err == nil {
				resource = gvr.Resource
			}
		}
	}
	d, _, err := s.Authorizer.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: "get", ResourceRequest: true,
		Name: "*", Namespace: "*", APIGroup: group, APIVersion: version, Resource: resource})
	if err != nil {
		return err
	}
	if d != authorizer.DecisionAllow {
		return fmt.Errorf(`user %v must have "get" permission on all objects of the referenced paramKind (kind=%s, apiVersion=%s)`, u, paramKind.Kind, paramKind.APIVersion)
	}
	return nil
}

// AllowUnconditionalUpdate is false, as in kube: a writer proves it read what it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok {
		return nil, nil, fmt.Errorf("not a ValidatingAdmissionPolicy: %T", obj)
	}
	return labels.Set(p.Labels), registry.ObjectMetaFieldsSet(&p.ObjectMeta, false), nil
}

// TableColumns are NAME VALIDATIONS PARAMKIND AGE, as kube's printer's.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Validations", Type: "integer", Description: "Validations indicates the number of validation rules defined in this configuration"},
		{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy"},
		registry.AgeColumn,
	}
}

// TableRow prints one policy: how many validations it has, its paramKind or <unset>.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	paramKind := "<unset>"
	if p.Spec.ParamKind != nil {
		paramKind = p.Spec.ParamKind.APIVersion + "/" + p.Spec.ParamKind.Kind
	}
	return []interface{}{p.Name, int64(len(p.Spec.Validations)), paramKind, registry.TranslateTimestampSince(p.CreationTimestamp)}
}

// GetResetFields: the status subresource keeps the stored spec and metadata.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"admissionregistration.k8s.io/v1": fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))}
}

// PrepareForUpdate keeps the stored spec and the metadata a status write may not
// change (labels, annotations, finalizers, owners); the generation stays.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, oldP := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy), old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	p.Spec = oldP.Spec
	metav1.ResetObjectMetaForStatus(&p.ObjectMeta, &oldP.ObjectMeta)
}

// ValidateUpdate checks the status
// (admissionregistration.ValidateValidatingAdmissionPolicyStatusUpdate).
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return admissionregistration.ValidateValidatingAdmissionPolicyStatusUpdate(obj.(*admissionregistrationv1.ValidatingAdmissionPolicy),
		old.(*admissionregistrationv1.ValidatingAdmissionPolicy))
}
