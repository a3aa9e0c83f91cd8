// Package policy enforces ValidatingAdmissionPolicies: on each write admission sees,
// every ValidatingAdmissionPolicyBinding whose policy exists and whose policy's
// matchConstraints and own matchResources match the request has the policy's CEL
// evaluated (matchConditions, variables, validations with their messageExpressions,
// auditAnnotations), against each param its paramRef selects, and acts on a failed
// validation as its validationActions say: Deny refuses the request, Warn adds a Warning
// header, Audit is dropped (skiff keeps no audit log).
//
// It is kube-apiserver's ValidatingAdmissionPolicy plugin run over skiff's registries:
// the matching (k8s.io/apiserver/pkg/admission/plugin/policy/matching, through
// generic.NewPolicyMatcher), the dispatch with its messages, failure policy, param
// collection and warnings (validating.NewDispatcher), the evaluation
// (validating.NewValidator) and the CEL compilers (plugin/cel's CompositedCompiler) are
// kube's own code. What skiff supplies in place of kube's informers is the source of
// policy hooks (policies and bindings read from their watch caches on each request, the
// compiled policies kept while a policy's resourceVersion stays) and adapters that read
// namespaces and params from the registry (watch cache first, etcd when the cache lacks
// the object, so a just-created param or namespace is found).
package policy

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	kubeadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/admission/webhook"
	"skiff.dev/services/apiserver/registry/rest"
)

// Lister reads a resource's objects: from its watch cache without a copy when it can
// (VisitCached reports false when it cannot), otherwise by a List at resourceVersion
// "0"; one object by Get (rest.GetCachedFirst reads it from the cache first).
// *registry.Store is one.
type Lister interface {
	rest.Getter
	VisitCached(namespace string, opts *metainternalversion.ListOptions, visit func(runtime.Object) bool) (bool, error)
	List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error)
}

// Resource is one resource the apiserver serves, as policies see it: params are read
// from it (paramKind), and the type checker resolves a rule's resources to kinds.
type Resource struct {
	Resource   schema.GroupVersionResource
	Kind       schema.GroupVersionKind
	Namespaced bool
	// Objects reads its objects; nil when it has none (reviews).
	Objects Lister
}

// Config is what the plugin needs.
type Config struct {
	// Policies and Bindings are the registries of ValidatingAdmissionPolicies and
	// ValidatingAdmissionPolicyBindings (their watch caches answer).
	Policies, Bindings Lister
	// Namespaces reads the request's namespace, whose labels namespaceSelector matches
	// and which CEL sees as namespaceObject.
	Namespaces Lister
	// Authorizer answers CEL's `authorizer`.
	Authorizer authorizer.UnconditionalAuthorizer
	// Scheme creates and converts typed objects (to an equivalent resource's kind).
	Scheme *runtime.Scheme
	// Equivalents lists, for a resource, the other resources serving its objects, which
	// matchPolicy Equivalent matches too; nil means none.
	Equivalents func(schema.GroupVersionResource) []webhook.Equivalent
	// Resources lists every served resource, custom resources included, at the time of
	// the call: where params are read from.
	Resources func() []Resource
}

// Plugin is the ValidatingAdmissionPolicy admission plugin, for the validating phase.
type Plugin struct {
	cfg      Config
	compiled *compiledPolicies
}

var _ admission.Interface = (*Plugin)(nil)

// New returns the plugin of cfg.
func New(cfg Config) *Plugin {
	return &Plugin{cfg: cfg, compiled: newCompiledPolicies()}
}

// excluded are the resources no policy sees: the policies and bindings themselves (so a
// policy cannot lock itself in) and the reviews, which are not stored. Mirrors the
// generic plugin's admissionResources and kube-apiserver's exclusion.Excluded().
var excluded = sets.New(
	admissionregistrationv1.Resource("validatingadmissionpolicies"),
	admissionregistrationv1.Resource("validatingadmissionpolicybindings"),
	admissionregistrationv1.Resource("mutatingadmissionpolicies"),
	admissionregistrationv1.Resource("mutatingadmissionpolicybindings"),
	schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"},
	schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"},
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
)

// Admit evaluates every binding in force on the request and refuses it as kube does:
// 422 Invalid by default (a validation's reason may say Forbidden 403 or
// RequestEntityTooLarge 413) with `ValidatingAdmissionPolicy '<policy>' with binding
// '<binding>' denied request: <message>` for the first Deny (in policy, then binding
// name order), prefixed as kube's admission.NewForbidden prefixes it; a policy that
// cannot be evaluated (its paramKind unknown, a param missing under
// parameterNotFoundAction Deny, an expression failing at run time or over its cost
// budget) refuses the request under failurePolicy Fail and is skipped under Ignore.
// Warn adds `Validation failed for ValidatingAdmissionPolicy '<policy>' with binding
// '<binding>': <message>` as a Warning header. Errors: the registry's when the policies
// or bindings cannot be read, 404 when the request's namespace does not exist.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes) error {
	if excluded.Has(a.Resource.GroupResource()) {
		return nil
	}
	hooks, err := p.hooks(ctx)
	if err != nil || len(hooks) == 0 {
		return err
	}
	namespaces := &namespaceLister{ctx: ctx, namespaces: p.cfg.Namespaces}
	matcher := generic.NewPolicyMatcher(matching.NewMatcher(namespaces, namespaceClient{lister: namespaces}))
	return validating.NewDispatcher(p.cfg.Authorizer, matcher).Dispatch(ctx, p.kubeAttributes(ctx, a), p.objectInterfaces(), hooks)
}

var namespacesResource = corev1.Resource("namespaces")

// kubeAttributes is the request in k8s.io/apiserver's terms. A request for a Namespace
// (but its create) has that Namespace's name as its namespace, as kube's request info
// gives it.
func (p *Plugin) kubeAttributes(ctx context.Context, a admission.Attributes) kubeadmission.Attributes {
	namespace := a.Namespace
	if a.Resource.GroupResource() == namespacesResource && namespace == "" && a.Operation != admission.Create {
		namespace = a.Name
	}
	u := a.User(ctx)
	if u == nil {
		u = &user.DefaultInfo{}
	}
	return kubeadmission.NewAttributesRecord(a.Object, a.OldObject, a.Kind, namespace, a.Name, a.Resource, a.Subresource,
		kubeadmission.Operation(a.Operation), a.Options, a.DryRun, u)
}
