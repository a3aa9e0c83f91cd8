// Package validatingadmissionpolicybinding is the admissionregistration.k8s.io/v1
// validatingadmissionpolicybindings resource: cluster-scoped
// ValidatingAdmissionPolicyBindings, each putting one ValidatingAdmissionPolicy in
// force, on the resources it selects, with its params and validation actions (see
// skiff.dev/services/apiserver/admission/policy). Mirrors
// k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicybinding.
package validatingadmissionpolicybinding

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicy"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
	"skiff.dev/services/apiserver/registry/rest"
)

// Resource is the resource's group and name.
var Resource = admissionregistrationv1.Resource("validatingadmissionpolicybindings")

// NewDescriptor serves admissionregistration.k8s.io/v1 validatingadmissionpolicybindings
// at /registry/validatingadmissionpolicybindings/<name>. authorizer checks that whoever
// sets a paramRef may read what it names; nil skips the check.
func NewDescriptor(authorizer authorizer.UnconditionalAuthorizer) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: admissionregistrationv1.SchemeGroupVersion,
		Resource:     Resource.Resource,
		SingularName: "validatingadmissionpolicybinding",
		Kind:         "ValidatingAdmissionPolicyBinding",
		Categories:   []string{"api-extensions"},
		NewFunc:      func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		NewListFunc:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
		Strategy:     Strategy{},
		REST: func(store *registry.Store, stores registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return store.WithStrategy(Strategy{Authorizer: authorizer, Policies: stores.Store(validatingadmissionpolicy.Resource),
				Resolver: validatingadmissionpolicy.StoreResolver{Stores: stores}}), nil, nil
		},
	}
}

// Strategy is the validatingadmissionpolicybindings strategy: kube's defaults are
// filled, the generation counts spec changes, an update must name the resourceVersion
// it replaces, and a paramRef may be set only by whoever may read what it names.
// Mirrors validatingAdmissionPolicyBindingStrategy.
type Strategy struct {
	// Authorizer checks the paramRef; nil skips the check (in-process writers).
	Authorizer authorizer.UnconditionalAuthorizer
	// Policies reads the bound policy, whose paramKind the paramRef names objects of.
	Policies rest.Getter
	// Resolver names the resource of the paramKind.
	Resolver validatingadmissionpolicy.ResourceResolver
}

var (
	_ registry.Strategy                    = Strategy{}
	_ registry.TablePrinter                = Strategy{}
	_ registry.UnconditionalUpdateStrategy = Strategy{}
)

// NamespaceScoped is false: bindings are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate sets generation 1 and fills the defaults.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	b := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	b.Generation = 1
	admissionregistration.SetDefaultsValidatingAdmissionPolicyBinding(b)
}

// PrepareForUpdate fills the defaults and bumps the generation when the spec changes.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	b, oldB := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding), old.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	admissionregistration.SetDefaultsValidatingAdmissionPolicyBinding(b)
	if !apiequality.Semantic.DeepEqual(b.Spec, oldB.Spec) {
		b.Generation = oldB.Generation + 1
	}
}

// Validate checks a new binding
// (admissionregistration.ValidateValidatingAdmissionPolicyBinding) and, when it is well
// formed, that the user may read what its paramRef names: a 422 Forbidden error at
// spec.paramRef otherwise.
func (s Strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	b := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	errs := admissionregistration.ValidateValidatingAdmissionPolicyBinding(b)
	if len(errs) == 0 {
		if err := s.authorize(ctx, b); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "paramRef"), err.Error()))
		}
	}
	return errs
}

// ValidateUpdate checks an update
// (admissionregistration.ValidateValidatingAdmissionPolicyBindingUpdate) and, when the
// paramRef or the policy changes, the paramRef as Validate does.
func (s Strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	b, oldB := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding), old.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	errs := admissionregistration.ValidateValidatingAdmissionPolicyBindingUpdate(b, oldB)
	if len(errs) == 0 && (oldB.Spec.ParamRef == nil || !apiequality.Semantic.DeepEqual(oldB.Spec.ParamRef, b.Spec.ParamRef) || oldB.Spec.PolicyName != b.Spec.PolicyName) {
		if err := s.authorize(ctx, b); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "paramRef"), err.Error()))
		}
	}
	return errs
}

// authorize requires that the request's user may get the object the paramRef names (a
// name) or list those it selects (a selector), in the paramKind of the bound policy;
// when that is unknown, in every group, version and resource. system:masters may
// anyway. Mirrors validatingAdmissionPolicyBindingStrategy.authorize.
func (s Strategy) authorize(ctx context.Context, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) error {
	paramRef := b.Spec.ParamRef
	if s.Authorizer == nil || paramRef == nil || rbacregistry.EscalationAllowed(ctx) {
		return nil
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return fmt.Errorf("cannot identify user to authorize read access to paramRef object")
	}
	resource, group, version := "*", "*", "*"
	var policyErr, gvParseErr, gvrResolveErr error
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	policy, policyErr = s.policy(ctx, b.Spec.PolicyName)
	if policyErr == nil && policy.Spec.ParamKind != nil {
		var gv schema.GroupVersion
		if gv, gvParseErr = schema.ParseGroupVersion(policy.Spec.ParamKind.APIVersion); gvParseErr == nil {
			group, version = gv.Group, gv.Version
			var gvr schema.GroupVersionResource
			if s.Resolver == nil {
				gvrResolveErr = fmt.Errorf("no resolver")
			} else if gvr, gvrResolveErr = s.Resolver.Resolve(gv.WithKind(policy.Spec.ParamKind.Kind)); gvrResolveErr == nil {
				resource = gvr.Resource
			}
		}
	}
	verb := "get"
	if paramRef.Name == "" {
		verb = "list"
	}
	d, _, err := s.Authorizer.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: verb, ResourceRequest: true,
		Name: paramRef.Name, Namespace: paramRef.Namespace, APIGroup: group, APIVersion: version, Resource: resource})
	if err != nil {
		return fmt.Errorf(`failed to authorize request: %w`, err)
	}
	if d == authorizer.DecisionAllow {
		return nil
	}
	switch {
	case policyErr != nil:
		return fmt.Errorf(`unable to get policy %s to determine minimum required permissions and user %v does not have "%v" permission for all groups, versions and resources`, b.Spec.PolicyName, u, verb)
	case gvParseErr != nil:
		return fmt.Errorf(`unable to parse paramKind %v to determine minimum required permissions and user %v does not have "%v" permission for all groups, versions and resources`, policy.Spec.ParamKind, u, verb)
	case gvrResolveErr != nil:
		return fmt.Errorf(`unable to resolve paramKind %v to determine minimum required permissions and user %v does not have "%v" permission for all groups, versions and resources`, policy.Spec.ParamKind, u, verb)
	}
	return fmt.Errorf(`user %v does not have "%v" permission on the object referenced by paramRef`, u, verb)
}

// policy reads the policy name, from the watch cache when it has it.
func (s Strategy) policy(ctx context.Context, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
	if s.Policies == nil {
		return nil, fmt.Errorf("no policies to read")
	}
	obj, err := rest.GetCachedFirst(ctx, s.Policies, "", name, nil)
	if err != nil {
		return nil, err
	}
	p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok {
		return nil, fmt.Errorf("policy storage returned %T", obj)
	}
	return p, nil
}

// AllowUnconditionalUpdate is false, as in kube: a writer proves it read what it replaces.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetAttrs returns labels and metadata.name, the only selectable field.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	b, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	if !ok {
		return nil, nil, fmt.Errorf("not a ValidatingAdmissionPolicyBinding: %T", obj)
	}
	return labels.Set(b.Labels), registry.ObjectMetaFieldsSet(&b.ObjectMeta, false), nil
}

// TableColumns are NAME POLICYNAME PARAMREF AGE, as kube's printer's.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to"},
		{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configration param"},
		registry.AgeColumn,
	}
}

// TableRow prints one binding: its policy and its paramRef (<namespace or *>/<name>,
// the selector, or <unset>).
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	b := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	param := "<unset>"
	if pr := b.Spec.ParamRef; pr != nil {
		switch {
		case pr.Name != "" && pr.Namespace != "":
			param = pr.Namespace + "/" + pr.Name
		case pr.Name != "":
			param = "*/" + pr.Name
		case pr.Selector != nil:
			param = pr.Selector.String()
		}
	}
	return []interface{}{b.Name, b.Spec.PolicyName, param, registry.TranslateTimestampSince(b.CreationTimestamp)}
}
