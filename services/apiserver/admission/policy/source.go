package policy

import (
	"context"
	"fmt"
	"sort"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// hooks is every policy with at least one binding, with its bindings, its compiled
// evaluator and where its params are read, in policy name order (bindings in name
// order): kube's policy source computes the same from its informers (in map order).
// A binding to a policy that does not exist is skipped; a policy whose paramKind's
// apiVersion does not parse is left out, as kube leaves it out; one whose paramKind no
// served resource has carries kube's configuration error. Errors: the registry's.
func (p *Plugin) hooks(ctx context.Context) ([]validating.PolicyHook, error) {
	objs, err := list(ctx, p.cfg.Bindings, "", nil)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	bindings := map[string][]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, obj := range objs {
		if b, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); ok {
			bindings[b.Spec.PolicyName] = append(bindings[b.Spec.PolicyName], b)
		}
	}
	if objs, err = list(ctx, p.cfg.Policies, "", nil); err != nil {
		return nil, err
	}
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, obj := range objs {
		if policy, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
			policies[policy.Name] = policy
		}
	}
	names := make([]string, 0, len(bindings))
	for name := range bindings {
		if policies[name] != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	hooks := make([]validating.PolicyHook, 0, len(names))
	var resources []Resource // read once, when a policy has a paramKind
	for _, name := range names {
		policy, bs := policies[name], bindings[name]
		sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
		hook := validating.PolicyHook{Policy: policy, Bindings: bs}
		if pk := policy.Spec.ParamKind; pk != nil {
			gv, err := schema.ParseGroupVersion(pk.APIVersion)
			if err != nil {
				continue
			}
			gvk := gv.WithKind(pk.Kind)
			if resources == nil && p.cfg.Resources != nil {
				resources = p.cfg.Resources()
			}
			r, ok := resourceOfKind(resources, gvk)
			if !ok || r.Objects == nil {
				hook.ConfigurationError = fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
			} else {
				hook.ParamInformer = paramInformer{lister: paramLister{ctx: ctx, objects: r.Objects}}
				hook.ParamScope = meta.RESTScopeRoot
				if r.Namespaced {
					hook.ParamScope = meta.RESTScopeNamespace
				}
			}
		}
		hook.Evaluator = p.compiled.evaluator(policy)
		hooks = append(hooks, hook)
	}
	p.compiled.keepOnly(policies)
	return hooks, nil
}

// resourceOfKind is the resource serving gvk.
func resourceOfKind(resources []Resource, gvk schema.GroupVersionKind) (Resource, bool) {
	for _, r := range resources {
		if r.Kind == gvk {
			return r, true
		}
	}
	return Resource{}, false
}

// compiledPolicies keeps each policy's evaluator while its resourceVersion stays:
// compiling CEL costs far more than evaluating it.
type compiledPolicies struct {
	mu      sync.Mutex
	entries map[types.UID]compiledPolicy
}

type compiledPolicy struct {
	resourceVersion string
	evaluator       validating.Validator
}

func newCompiledPolicies() *compiledPolicies {
	return &compiledPolicies{entries: map[types.UID]compiledPolicy{}}
}

// evaluator is policy's evaluator, compiled now if it changed since last time.
func (c *compiledPolicies) evaluator(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[policy.UID]
	if !ok || e.resourceVersion != policy.ResourceVersion {
		e = compiledPolicy{resourceVersion: policy.ResourceVersion, evaluator: compile(policy)}
		c.entries[policy.UID] = e
	}
	return e.evaluator
}

// keepOnly forgets the evaluators of policies no longer stored.
func (c *compiledPolicies) keepOnly(policies map[string]*admissionregistrationv1.ValidatingAdmissionPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) <= len(policies) {
		return
	}
	live := make(map[types.UID]bool, len(policies))
	for _, policy := range policies {
		live[policy.UID] = true
	}
	for uid := range c.entries {
		if !live[uid] {
			delete(c.entries, uid)
		}
	}
}

// compositionEnv is the base CEL environment policies compile in, built once.
var compositionEnv = sync.OnceValue(func() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
})

// compile builds a policy's evaluator: its variables compiled in order into a
// composition compiler, then its matchConditions, validations and auditAnnotations
// (params declared with a paramKind, the authorizer declared) and its messageExpressions
// (no authorizer), all in the environment of stored expressions. A policy that does not
// compile (stored by an apiserver with other CEL libraries) fails each request it
// matches as its failurePolicy says. Mirrors validating.compilePolicy, which kube does
// not export.
func compile(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	hasParams := policy.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	messageVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}
	failurePolicy := policy.Spec.FailurePolicy
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, failurePolicy, err)
	}
	variables := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, vars, environment.StoredExpressions)

	var matcher matchconditions.Matcher
	if conditions := policy.Spec.MatchConditions; len(conditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			accessors[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(accessors, vars, environment.StoredExpressions),
			failurePolicy, "policy", "validate", policy.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	annotations := make([]plugincel.ExpressionAccessor, len(policy.Spec.AuditAnnotations))
	for i, a := range policy.Spec.AuditAnnotations {
		annotations[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, vars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(annotations, vars, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageVars, environment.StoredExpressions),
		failurePolicy,
		nil,
	)
}
