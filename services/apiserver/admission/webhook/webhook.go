// Package webhook calls the admission webhooks that MutatingWebhookConfigurations and
// ValidatingWebhookConfigurations register: for each write admission sees, the webhooks
// whose rules, namespaceSelector, objectSelector and matchConditions match it get an
// admission.k8s.io AdmissionReview over HTTPS and answer whether to allow it, mutating
// webhooks with a JSONPatch to the object. Mutating webhooks run one after the other, in
// the order of their configurations' names and then of the webhooks in each;
// validating webhooks run in parallel. Requests for webhook configurations themselves
// are never sent to webhooks, so a broken webhook cannot lock its own configuration.
// Mirrors k8s.io/apiserver/pkg/admission/plugin/webhook (generic, mutating, validating,
// request, predicates) as kube-apiserver 1.32 runs it.
package webhook

import (
	"context"
	"sort"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/trace"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubeadmission "k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/serviceresolver"
)

// Lister reads a resource's objects: from its watch cache without a copy when it can
// (VisitCached reports false when it cannot), otherwise by a List at resourceVersion
// "0". *registry.Store is one.
type Lister interface {
	VisitCached(namespace string, opts *metainternalversion.ListOptions, visit func(runtime.Object) bool) (bool, error)
	List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error)
}

// Equivalent is a resource that serves the same objects as another one, in another
// group or version, and the kind its objects have there.
type Equivalent struct {
	Resource schema.GroupVersionResource
	Kind     schema.GroupVersionKind
}

// Config is what the webhooks need.
type Config struct {
	// MutatingWebhookConfigurations and ValidatingWebhookConfigurations are the
	// registries of the configurations (their watch caches answer).
	MutatingWebhookConfigurations, ValidatingWebhookConfigurations Lister
	// Namespaces reads the namespace of a request, whose labels namespaceSelector
	// matches.
	Namespaces rest.Getter
	// Resolver resolves a clientConfig.service to a ready endpoint.
	Resolver *serviceresolver.EndpointResolver
	// Authorizer answers the `authorizer` of matchConditions' CEL.
	Authorizer authorizer.UnconditionalAuthorizer
	// Scheme encodes, decodes and converts typed objects.
	Scheme *runtime.Scheme
	// Equivalents lists, for a resource, the other resources serving its objects (skiff
	// serves core/v1 and events.k8s.io/v1 Events from one storage), which a webhook with
	// matchPolicy Equivalent matches too; nil means none.
	Equivalents func(schema.GroupVersionResource) []Equivalent
	// TracerProvider traces each call to a webhook (otelhttp, one client span per call,
	// its traceparent sent along); nil means the global provider.
	TracerProvider trace.TracerProvider
}

// Webhooks calls the registered webhooks: Mutating and Validating are its two admission
// plugins, for the two phases of the admission chain.
type Webhooks struct {
	cfg        Config
	clients    *clientManager
	mutating   *source
	validating *source
}

// New returns the webhooks of cfg.
func New(cfg Config) *Webhooks {
	return &Webhooks{
		cfg:        cfg,
		clients:    newClientManager(cfg),
		mutating:   &source{lister: cfg.MutatingWebhookConfigurations, mutating: true},
		validating: &source{lister: cfg.ValidatingWebhookConfigurations},
	}
}

// Mutating is the MutatingAdmissionWebhook plugin.
func (w *Webhooks) Mutating() admission.Interface { return &mutatingDispatcher{w} }

// Validating is the ValidatingAdmissionWebhook plugin.
func (w *Webhooks) Validating() admission.Interface { return &validatingDispatcher{w} }

// hook is one webhook of a stored configuration, with what matching it needs parsed
// once: its selectors and its compiled matchConditions.
type hook struct {
	// uid names the webhook in its configuration: "<configuration>/<webhook>/<index>".
	uid           string
	configuration string
	name          string
	mutating      bool

	clientConfig            admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           admissionregistrationv1.FailurePolicyType
	matchPolicy             admissionregistrationv1.MatchPolicyType
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
	reinvocationPolicy      admissionregistrationv1.ReinvocationPolicyType

	namespaceSelector, objectSelector       labels.Selector
	namespaceSelectorErr, objectSelectorErr error

	compileOnce sync.Once
	matcher     matchconditions.Matcher
}

func newHook(configuration string, index int, name string, mutating bool, cc admissionregistrationv1.WebhookClientConfig,
	rules []admissionregistrationv1.RuleWithOperations, failurePolicy *admissionregistrationv1.FailurePolicyType,
	matchPolicy *admissionregistrationv1.MatchPolicyType, namespaceSelector, objectSelector *metav1.LabelSelector,
	sideEffects *admissionregistrationv1.SideEffectClass, timeoutSeconds *int32, versions []string,
	conditions []admissionregistrationv1.MatchCondition) *hook {
	h := &hook{
		uid: configuration + "/" + name + "/" + strconv.Itoa(index), configuration: configuration, name: name, mutating: mutating,
		clientConfig: *cc.DeepCopy(), rules: rules, failurePolicy: admissionregistrationv1.Fail, matchPolicy: admissionregistrationv1.Equivalent,
		sideEffects: sideEffects, timeoutSeconds: timeoutSeconds, admissionReviewVersions: versions, matchConditions: conditions,
		reinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
	}
	if failurePolicy != nil {
		h.failurePolicy = *failurePolicy
	}
	if matchPolicy != nil {
		h.matchPolicy = *matchPolicy
	}
	h.namespaceSelector, h.namespaceSelectorErr = parseSelector(namespaceSelector)
	h.objectSelector, h.objectSelectorErr = parseSelector(objectSelector)
	return h
}

func parseSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// conditionCompiler compiles matchConditions in kube's admission CEL environment, built
// once on first use.
var conditionCompiler = sync.OnceValue(func() plugincel.ConditionCompiler {
	return plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// compiledMatcher is the hook's matchConditions, compiled on first use (the compiled
// form lives as long as the configuration's resourceVersion).
func (h *hook) compiledMatcher() matchconditions.Matcher {
	h.compileOnce.Do(func() {
		expressions := make([]plugincel.ExpressionAccessor, len(h.matchConditions))
		for i, mc := range h.matchConditions {
			expressions[i] = &matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression}
		}
		kind := "validating"
		if h.mutating {
			kind = "admit"
		}
		h.matcher = matchconditions.NewMatcher(conditionCompiler().CompileCondition(expressions,
			plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions),
			&h.failurePolicy, "webhook", kind, h.name)
	})
	return h.matcher
}

// source is the webhooks of one kind of configuration, read from its registry on each
// request; a configuration's parsed hooks are kept while its resourceVersion stays.
type source struct {
	lister   Lister
	mutating bool

	mu     sync.Mutex
	parsed map[types.UID]parsedConfiguration
}

type parsedConfiguration struct {
	resourceVersion string
	hooks           []*hook
}

// hooks lists every webhook, ordered by configuration name, then as each configuration
// lists them. Errors: the registry's (a 500 or 503 status).
func (s *source) hooks(ctx context.Context) ([]*hook, error) {
	var configs []runtime.Object
	served, err := s.lister.VisitCached("", &metainternalversion.ListOptions{}, func(obj runtime.Object) bool {
		configs = append(configs, obj)
		return true
	})
	if err != nil {
		return nil, err
	}
	if !served {
		list, err := s.lister.List(ctx, "", &metainternalversion.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return nil, err
		}
		if configs, err = meta.ExtractList(list); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	metas := make([]metav1.Object, 0, len(configs))
	for _, obj := range configs {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		metas = append(metas, m)
	}
	order := make([]int, len(configs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return metas[order[i]].GetName() < metas[order[j]].GetName() })

	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[types.UID]parsedConfiguration, len(configs))
	var out []*hook
	for _, i := range order {
		m := metas[i]
		p, ok := s.parsed[m.GetUID()]
		if !ok || p.resourceVersion != m.GetResourceVersion() {
			p = parsedConfiguration{resourceVersion: m.GetResourceVersion(), hooks: parse(configs[i])}
		}
		seen[m.GetUID()] = p
		out = append(out, p.hooks...)
	}
	s.parsed = seen
	return out, nil
}

// parse turns a configuration into its hooks.
func parse(obj runtime.Object) []*hook {
	var hooks []*hook
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i, w := range c.Webhooks {
			h := newHook(c.Name, i, w.Name, true, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector,
				w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions)
			if w.ReinvocationPolicy != nil {
				h.reinvocationPolicy = *w.ReinvocationPolicy
			}
			hooks = append(hooks, h)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i, w := range c.Webhooks {
			hooks = append(hooks, newHook(c.Name, i, w.Name, false, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy,
				w.NamespaceSelector, w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions))
		}
	}
	return hooks
}

// exempt reports whether a is a write of an admission configuration, which no webhook
// is called for. Mirrors rules.IsExemptAdmissionConfigurationResource.
func exempt(a admission.Attributes) bool {
	if a.Resource.Group != admissionregistrationv1.GroupName {
		return false
	}
	switch a.Resource.Resource {
	case "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
		"validatingadmissionpolicies", "validatingadmissionpolicybindings",
		"mutatingadmissionpolicies", "mutatingadmissionpolicybindings":
		return true
	}
	return false
}

// request is one write as the webhooks see it.
type request struct {
	admission.Attributes
	user user.Info
	// namespace is the request's namespace as kube names it: a Namespace's own name
	// when the request is for that Namespace (but for its create).
	namespace string
}

var namespacesResource = corev1.SchemeGroupVersion.WithResource("namespaces")

func newRequest(ctx context.Context, a admission.Attributes) *request {
	r := &request{Attributes: a, user: a.User(ctx), namespace: a.Namespace}
	if r.user == nil {
		r.user = &user.DefaultInfo{}
	}
	if a.Resource == namespacesResource && a.Namespace == "" && a.Operation != admission.Create {
		r.namespace = a.Name
	}
	return r
}

// invocation is a webhook to call for a request, with the resource and kind it matched
// (the request's, or an equivalent one's) and the request's objects in that kind.
type invocation struct {
	hook        *hook
	resource    schema.GroupVersionResource
	subresource string
	kind        schema.GroupVersionKind
	object      runtime.Object
	oldObject   runtime.Object
}

// kubeAttributes is the request in k8s.io/apiserver's terms, for its CEL evaluation.
func (inv *invocation) kubeAttributes(r *request) *kubeadmission.VersionedAttributes {
	record := kubeadmission.NewAttributesRecord(inv.object, inv.oldObject, r.Kind, r.namespace, r.Name, r.Resource, r.Subresource,
		kubeadmission.Operation(r.Operation), r.Options, r.DryRun, r.user)
	return &kubeadmission.VersionedAttributes{Attributes: record, VersionedKind: inv.kind,
		VersionedObject: kubeadmission.NewLazyObject(inv.object), VersionedOldObject: kubeadmission.NewLazyObject(inv.oldObject)}
}
