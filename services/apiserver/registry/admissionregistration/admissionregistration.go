// Package admissionregistration holds what the admissionregistration.k8s.io/v1 webhook
// configurations share: their defaults, validation and table, for the
// mutatingwebhookconfigurations and validatingwebhookconfigurations resources (the
// subpackages). Mirrors k8s.io/kubernetes/pkg/apis/admissionregistration/v1/defaults.go
// and pkg/apis/admissionregistration/validation.
package admissionregistration

import (
	"fmt"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	utilwebhook "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
)

// Defaults kube gives a webhook's unset fields.
const (
	DefaultTimeoutSeconds int32 = 10
	DefaultServicePort    int32 = 443
)

// SetDefaultsMutating fills every webhook's unset fields: failurePolicy Fail,
// matchPolicy Equivalent, namespaceSelector and objectSelector {} (everything),
// timeoutSeconds 10, reinvocationPolicy Never, each rule's scope "*" and a service's port
// 443. sideEffects and admissionReviewVersions have no default in v1: they are required.
// Mirrors SetDefaults_MutatingWebhook, SetDefaults_Rule and SetDefaults_ServiceReference.
func SetDefaultsMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	for i := range c.Webhooks {
		h := &c.Webhooks[i]
		setCommonDefaults(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
		if h.ReinvocationPolicy == nil {
			h.ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
		}
	}
}

// SetDefaultsValidating is SetDefaultsMutating for validating webhooks (which have no
// reinvocationPolicy). Mirrors SetDefaults_ValidatingWebhook.
func SetDefaultsValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range c.Webhooks {
		h := &c.Webhooks[i]
		setCommonDefaults(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
	}
}

func setCommonDefaults(failurePolicy **admissionregistrationv1.FailurePolicyType, matchPolicy **admissionregistrationv1.MatchPolicyType,
	namespaceSelector, objectSelector **metav1.LabelSelector, timeoutSeconds **int32,
	rules []admissionregistrationv1.RuleWithOperations, cc *admissionregistrationv1.WebhookClientConfig) {
	if *failurePolicy == nil {
		*failurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	if *matchPolicy == nil {
		*matchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	if *namespaceSelector == nil {
		*namespaceSelector = &metav1.LabelSelector{}
	}
	if *objectSelector == nil {
		*objectSelector = &metav1.LabelSelector{}
	}
	if *timeoutSeconds == nil {
		*timeoutSeconds = ptr.To(DefaultTimeoutSeconds)
	}
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
		}
	}
	if cc.Service != nil && cc.Service.Port == nil {
		cc.Service.Port = ptr.To(DefaultServicePort)
	}
}

// webhook is the view validation takes of a MutatingWebhook or a ValidatingWebhook.
type webhook struct {
	name                    string
	clientConfig            admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           *admissionregistrationv1.FailurePolicyType
	matchPolicy             *admissionregistrationv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	objectSelector          *metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
	mutating                bool
	reinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType
}

func mutatingWebhooks(hooks []admissionregistrationv1.MutatingWebhook) []webhook {
	out := make([]webhook, len(hooks))
	for i, h := range hooks {
		out[i] = webhook{name: h.Name, clientConfig: h.ClientConfig, rules: h.Rules, failurePolicy: h.FailurePolicy,
			matchPolicy: h.MatchPolicy, namespaceSelector: h.NamespaceSelector, objectSelector: h.ObjectSelector,
			sideEffects: h.SideEffects, timeoutSeconds: h.TimeoutSeconds, admissionReviewVersions: h.AdmissionReviewVersions,
			matchConditions: h.MatchConditions, mutating: true, reinvocationPolicy: h.ReinvocationPolicy}
	}
	return out
}

func validatingWebhooks(hooks []admissionregistrationv1.ValidatingWebhook) []webhook {
	out := make([]webhook, len(hooks))
	for i, h := range hooks {
		out[i] = webhook{name: h.Name, clientConfig: h.ClientConfig, rules: h.Rules, failurePolicy: h.FailurePolicy,
			matchPolicy: h.MatchPolicy, namespaceSelector: h.NamespaceSelector, objectSelector: h.ObjectSelector,
			sideEffects: h.SideEffects, timeoutSeconds: h.TimeoutSeconds, admissionReviewVersions: h.AdmissionReviewVersions,
			matchConditions: h.MatchConditions}
	}
	return out
}

// validationOptions relax validation on update for what an older apiserver may have
// stored, as kube's do: a rule is enforced on update only when the stored object already
// satisfies it.
type validationOptions struct {
	// ignoreMatchConditions skips them: the update leaves them as stored.
	ignoreMatchConditions bool
	// requireNoSideEffects allows sideEffects None and NoneOnDryRun only (v1); otherwise
	// Unknown and Some too.
	requireNoSideEffects bool
	// requireRecognizedAdmissionReviewVersion requires v1 or v1beta1 among the versions.
	requireRecognizedAdmissionReviewVersion bool
	requireUniqueWebhookNames               bool
	allowInvalidLabelValueInSelector        bool
	// storedExpressions are match conditions already stored, compiled in the stored
	// expressions' CEL environment (which may know more than a new one admits).
	storedExpressions sets.Set[string]
	// allowParamsInMatchConditions declares `params` to match conditions: those of a
	// ValidatingAdmissionPolicy with a paramKind.
	allowParamsInMatchConditions bool
}

var createOptions = validationOptions{
	requireNoSideEffects:                    true,
	requireRecognizedAdmissionReviewVersion: true,
	requireUniqueWebhookNames:               true,
}

// updateOptions are the options validating an update of webhooks stored as old.
func updateOptions(hooks, old []webhook) validationOptions {
	opts := validationOptions{
		ignoreMatchConditions:                   len(hooks) == len(old),
		requireNoSideEffects:                    true,
		requireRecognizedAdmissionReviewVersion: true,
		requireUniqueWebhookNames:               true,
		storedExpressions:                       sets.New[string](),
	}
	names := sets.New[string]()
	for i, h := range old {
		if opts.ignoreMatchConditions && !equalMatchConditions(hooks[i].matchConditions, h.matchConditions) {
			opts.ignoreMatchConditions = false
		}
		if h.sideEffects == nil || !noSideEffectClasses.Has(string(*h.sideEffects)) {
			opts.requireNoSideEffects = false
		}
		if len(h.admissionReviewVersions) > 0 && !hasAcceptedVersion(h.admissionReviewVersions) {
			opts.requireRecognizedAdmissionReviewVersion = false
		}
		if names.Has(h.name) {
			opts.requireUniqueWebhookNames = false
		}
		names.Insert(h.name)
		for _, sel := range []*metav1.LabelSelector{h.namespaceSelector, h.objectSelector} {
			if sel != nil && len(metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, nil)) > 0 {
				opts.allowInvalidLabelValueInSelector = true
			}
		}
		for _, mc := range h.matchConditions {
			opts.storedExpressions.Insert(mc.Expression)
		}
	}
	return opts
}

func equalMatchConditions(a, b []admissionregistrationv1.MatchCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ValidateMutatingWebhookConfiguration checks a new MutatingWebhookConfiguration (see
// validateConfiguration). Mirrors ValidateMutatingWebhookConfiguration.
func ValidateMutatingWebhookConfiguration(c *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	return validateConfiguration(&c.ObjectMeta, mutatingWebhooks(c.Webhooks), createOptions)
}

// ValidateMutatingWebhookConfigurationUpdate checks c replacing old: the metadata
// update, then c as new, with the rules old already breaks relaxed. Mirrors
// ValidateMutatingWebhookConfigurationUpdate.
func ValidateMutatingWebhookConfigurationUpdate(c, old *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	hooks := mutatingWebhooks(c.Webhooks)
	return append(allErrs, validateConfiguration(&c.ObjectMeta, hooks, updateOptions(hooks, mutatingWebhooks(old.Webhooks)))...)
}

// ValidateValidatingWebhookConfiguration checks a new ValidatingWebhookConfiguration
// (see validateConfiguration). Mirrors ValidateValidatingWebhookConfiguration.
func ValidateValidatingWebhookConfiguration(c *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	return validateConfiguration(&c.ObjectMeta, validatingWebhooks(c.Webhooks), createOptions)
}

// ValidateValidatingWebhookConfigurationUpdate is
// ValidateMutatingWebhookConfigurationUpdate for validating webhooks. Mirrors
// ValidateValidatingWebhookConfigurationUpdate.
func ValidateValidatingWebhookConfigurationUpdate(c, old *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	hooks := validatingWebhooks(c.Webhooks)
	return append(allErrs, validateConfiguration(&c.ObjectMeta, hooks, updateOptions(hooks, validatingWebhooks(old.Webhooks)))...)
}

// validateConfiguration checks the metadata (a DNS subdomain name) and each of
// webhooks[i]: a name that is a fully qualified domain name of at least three segments,
// unique in the configuration; rules (operations, apiGroups, apiVersions, resources,
// scope); failurePolicy Fail or Ignore; matchPolicy Exact or Equivalent; sideEffects
// required, None or NoneOnDryRun; timeoutSeconds within 1..30; valid label selectors;
// reinvocationPolicy Never or IfNeeded; clientConfig with exactly one of url (https, a
// host, no user, query or fragment) and service (name, namespace, port 1..65535, a path
// of DNS subdomain segments); matchConditions (at most 64, unique qualified names, CEL
// expressions that compile to bool over object, oldObject, request, namespaceObject and
// authorizer); admissionReviewVersions including v1 or v1beta1, each a DNS label, none
// twice. Messages and field paths are kube's.
func validateConfiguration(meta *metav1.ObjectMeta, hooks []webhook, opts validationOptions) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	names := sets.New[string]()
	for i := range hooks {
		h := &hooks[i]
		fldPath := field.NewPath("webhooks").Index(i)
		allErrs = append(allErrs, validateWebhook(h, opts, fldPath)...)
		allErrs = append(allErrs, validateAdmissionReviewVersions(h.admissionReviewVersions, opts.requireRecognizedAdmissionReviewVersion, fldPath.Child("admissionReviewVersions"))...)
		if opts.requireUniqueWebhookNames && h.name != "" {
			if names.Has(h.name) {
				allErrs = append(allErrs, field.Duplicate(fldPath.Child("name"), h.name))
			}
			names.Insert(h.name)
		}
	}
	return allErrs
}

var (
	supportedFailurePolicies = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	supportedMatchPolicies   = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	allSideEffectClasses     = sets.New(string(admissionregistrationv1.SideEffectClassUnknown), string(admissionregistrationv1.SideEffectClassNone),
		string(admissionregistrationv1.SideEffectClassSome), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	noSideEffectClasses = sets.New(string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	supportedOperations = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect))
	supportedReinvocationPolicies = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	supportedScopes               = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
)

func validateWebhook(h *webhook, opts validationOptions, fldPath *field.Path) field.ErrorList {
	allErrs := utilvalidation.IsFullyQualifiedName(fldPath.Child("name"), h.name)
	for i := range h.rules {
		allErrs = append(allErrs, validateRuleWithOperations(&h.rules[i], fldPath.Child("rules").Index(i))...)
	}
	if h.failurePolicy != nil && !supportedFailurePolicies.Has(string(*h.failurePolicy)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("failurePolicy"), *h.failurePolicy, sets.List(supportedFailurePolicies)))
	}
	if h.matchPolicy != nil && !supportedMatchPolicies.Has(string(*h.matchPolicy)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("matchPolicy"), *h.matchPolicy, sets.List(supportedMatchPolicies)))
	}
	allowedSideEffects := allSideEffectClasses
	if opts.requireNoSideEffects {
		allowedSideEffects = noSideEffectClasses
	}
	switch {
	case h.sideEffects == nil:
		allErrs = append(allErrs, field.Required(fldPath.Child("sideEffects"), fmt.Sprintf("must specify one of %v", strings.Join(sets.List(allowedSideEffects), ", "))))
	case !allowedSideEffects.Has(string(*h.sideEffects)):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("sideEffects"), *h.sideEffects, sets.List(allowedSideEffects)))
	}
	if h.timeoutSeconds != nil && (*h.timeoutSeconds > 30 || *h.timeoutSeconds < 1) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("timeoutSeconds"), *h.timeoutSeconds, "the timeout value must be between 1 and 30 seconds"))
	}
	selectorOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.allowInvalidLabelValueInSelector}
	if h.namespaceSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(h.namespaceSelector, selectorOpts, fldPath.Child("namespaceSelector"))...)
	}
	if h.objectSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(h.objectSelector, selectorOpts, fldPath.Child("objectSelector"))...)
	}
	if h.mutating && h.reinvocationPolicy != nil && !supportedReinvocationPolicies.Has(string(*h.reinvocationPolicy)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("reinvocationPolicy"), *h.reinvocationPolicy, sets.List(supportedReinvocationPolicies)))
	}
	cc, ccPath := h.clientConfig, fldPath.Child("clientConfig")
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		allErrs = append(allErrs, field.Required(ccPath, "exactly one of url or service is required"))
	case cc.URL != nil:
		allErrs = append(allErrs, utilwebhook.ValidateWebhookURL(ccPath.Child("url"), *cc.URL, true)...)
	default:
		port := DefaultServicePort
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		allErrs = append(allErrs, utilwebhook.ValidateWebhookService(ccPath.Child("service"), cc.Service.Namespace, cc.Service.Name, cc.Service.Path, port)...)
	}
	if !opts.ignoreMatchConditions {
		allErrs = append(allErrs, validateMatchConditions(h.matchConditions, opts, fldPath.Child("matchConditions"))...)
	}
	return allErrs
}

func hasWildcard(items []string) bool {
	for _, s := range items {
		if s == "*" {
			return true
		}
	}
	return false
}

func validateRuleWithOperations(r *admissionregistrationv1.RuleWithOperations, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	ops := make([]string, len(r.Operations))
	for i, op := range r.Operations {
		ops[i] = string(op)
	}
	if len(ops) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("operations"), ""))
	}
	if len(ops) > 1 && hasWildcard(ops) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range ops {
		if !supportedOperations.Has(op) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("operations").Index(i), r.Operations[i], sets.List(supportedOperations)))
		}
	}
	if len(r.APIGroups) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && hasWildcard(r.APIGroups) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	// A group may be empty: the core group.
	if len(r.APIVersions) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && hasWildcard(r.APIVersions) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("apiVersions").Index(i), ""))
		}
	}
	allErrs = append(allErrs, validateResources(r.Resources, fldPath.Child("resources"))...)
	if r.Scope != nil && !supportedScopes.Has(string(*r.Scope)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("scope"), *r.Scope, sets.List(supportedScopes)))
	}
	return allErrs
}

// validateResources checks resources and resource/subresource forms: none empty, and no
// form another one already covers ('*', 'x/*', '*/y', '*/*').
func validateResources(resources []string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(resources) == 0 {
		allErrs = append(allErrs, field.Required(fldPath, ""))
	}
	withWildcardSubresource, withWildcardResource := sets.New[string](), sets.New[string]()
	hasDoubleWildcard, hasSingleWildcard, hasPlainResource := false, false, false
	for i, resSub := range resources {
		if resSub == "" {
			allErrs = append(allErrs, field.Required(fldPath.Index(i), ""))
			continue
		}
		hasDoubleWildcard = hasDoubleWildcard || resSub == "*/*"
		hasSingleWildcard = hasSingleWildcard || resSub == "*"
		res, sub, found := strings.Cut(resSub, "/")
		if !found {
			hasPlainResource = resSub != "*"
			continue
		}
		if withWildcardSubresource.Has(res) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), resSub, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, resSub)))
		}
		if withWildcardResource.Has(sub) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), resSub, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, resSub)))
		}
		if sub == "*" {
			withWildcardSubresource.Insert(res)
		}
		if res == "*" {
			withWildcardResource.Insert(sub)
		}
	}
	if len(resources) > 1 && hasDoubleWildcard {
		allErrs = append(allErrs, field.Invalid(fldPath, resources, "if '*/*' is present, must not specify other resources"))
	}
	if hasSingleWildcard && hasPlainResource {
		allErrs = append(allErrs, field.Invalid(fldPath, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return allErrs
}

// AcceptedAdmissionReviewVersions are the AdmissionReview versions a webhook must accept
// one of: the apiserver sends the first of its admissionReviewVersions it knows.
var AcceptedAdmissionReviewVersions = []string{"v1", "v1beta1"}

func hasAcceptedVersion(versions []string) bool {
	for _, v := range versions {
		for _, accepted := range AcceptedAdmissionReviewVersions {
			if v == accepted {
				return true
			}
		}
	}
	return false
}

func validateAdmissionReviewVersions(versions []string, requireRecognized bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(versions) == 0 {
		return append(allErrs, field.Required(fldPath, fmt.Sprintf("must specify one of %v", strings.Join(AcceptedAdmissionReviewVersions, ", "))))
	}
	seen := sets.New[string]()
	for i, v := range versions {
		if seen.Has(v) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), v, "duplicate version"))
			continue
		}
		seen.Insert(v)
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), v, msg))
		}
	}
	if requireRecognized && !hasAcceptedVersion(versions) {
		allErrs = append(allErrs, field.Invalid(fldPath, versions, fmt.Sprintf("must include at least one of %v", strings.Join(AcceptedAdmissionReviewVersions, ", "))))
	}
	return allErrs
}

// MaxMatchConditions is the most matchConditions a webhook may have.
const MaxMatchConditions = 64

func validateMatchConditions(conditions []admissionregistrationv1.MatchCondition, opts validationOptions, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(conditions) > MaxMatchConditions {
		allErrs = append(allErrs, field.TooMany(fldPath, len(conditions), MaxMatchConditions))
	}
	names := sets.New[string]()
	for i, mc := range conditions {
		p := fldPath.Index(i)
		if expr := strings.TrimSpace(mc.Expression); expr == "" {
			allErrs = append(allErrs, field.Required(p.Child("expression"), ""))
		} else {
			allErrs = append(allErrs, validateMatchConditionExpression(expr, opts.storedExpressions.Has(expr), opts.allowParamsInMatchConditions, p.Child("expression"))...)
		}
		if mc.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				allErrs = append(allErrs, field.Duplicate(p.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
	}
	return allErrs
}

// celCompiler compiles match conditions in kube's admission CEL environment; building it
// is costly, so it is built once, on first use.
var celCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// validateMatchConditionExpression compiles expr as a match condition: variables object,
// oldObject, request, namespaceObject and authorizer (and params with hasParams); a
// bool result. stored compiles it in the environment of stored expressions.
func validateMatchConditionExpression(expr string, stored, hasParams bool, fldPath *field.Path) field.ErrorList {
	envType := environment.NewExpressions
	if stored {
		envType = environment.StoredExpressions
	}
	result := celCompiler().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true, HasParams: hasParams}, envType)
	if result.Error == nil {
		return nil
	}
	return field.ErrorList{celError(fldPath, expr, result.Error)}
}

// celError is a compilation error of expr as the field error kube reports: Required,
// Invalid (with the compiler's message) or InternalError. Mirrors
// convertCELErrorToValidationError.
func celError(fldPath *field.Path, expr string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(fldPath, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(fldPath, expr, err.Detail)
	default:
		return field.InternalError(fldPath, err)
	}
}

// TableColumns are NAME WEBHOOKS AGE, the printer's columns for both configurations.
func TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks registered in this configuration"},
		registry.AgeColumn,
	}
}
