// Package rbac is the RBAC authorizer: a request is allowed when a rule of a Role or
// ClusterRole bound to its user, one of its groups or its service account allows it.
// It reads Roles, ClusterRoles and their bindings from memory (Policy: informers over the
// registry) and never lists per request. Mirrors k8s.io/kubernetes/plugin/pkg/auth/
// authorizer/rbac and pkg/registry/rbac/validation's DefaultRuleResolver.
package rbac

import (
	"context"
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"
)

// Authorizer decides requests from the RBAC policy; it implements the apiserver's
// authorizer and authorizer.RuleResolver (for SelfSubjectRulesReview), and its Resolver
// answers the registry's escalation check.
type Authorizer struct {
	Resolver *RuleResolver
}

// New is the RBAC authorizer over policy.
func New(policy *Policy) *Authorizer { return &Authorizer{Resolver: &RuleResolver{policy: policy}} }

// Authorize allows a when a rule bound to its user allows it; otherwise it has no
// opinion (a later authorizer, or none, decides). The reason lists bindings whose role
// is missing ("RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"), as kube's
// does; a plain denial has no reason.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "", nil
	}
	allowed := false
	var errs []error
	a.Resolver.VisitRulesFor(ctx, u, attrs.GetNamespace(), func(rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
			return true
		}
		if RuleAllows(attrs, rule) {
			allowed = true
			return false
		}
		return true
	})
	if allowed {
		return authorizer.DecisionAllow, "", nil
	}
	if len(errs) > 0 {
		return authorizer.DecisionNoOpinion, fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs)), nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// RulesFor lists the rules u holds in namespace, as SelfSubjectRulesReview reports them.
// Mirrors RBACAuthorizer.RulesFor.
func (a *Authorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	rules, err := a.Resolver.RulesFor(ctx, u, namespace)
	var resourceRules []authorizer.ResourceRuleInfo
	var nonResourceRules []authorizer.NonResourceRuleInfo
	for _, r := range rules {
		if len(r.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{
				Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
		}
	}
	return resourceRules, nonResourceRules, false, err
}

// RuleResolver finds the rules bound to a user. Mirrors DefaultRuleResolver.
type RuleResolver struct {
	policy *Policy
}

// VisitRulesFor calls visit with each rule bound to u: its ClusterRoleBindings' rules,
// then (namespace set) its RoleBindings' rules in namespace, each set of bindings in name
// order; a binding whose role is missing is visited as an error. visit returns false to
// stop.
func (r *RuleResolver) VisitRulesFor(_ context.Context, u user.Info, namespace string, visit func(rule *rbacv1.PolicyRule, err error) bool) {
	keys := userKeys(u)
	for _, b := range byName(bindingsFor(r.policy.clusterRoleBindings, keys, "")) {
		crb := b.(*rbacv1.ClusterRoleBinding)
		if !r.visitRole(crb.RoleRef, "", visit) {
			return
		}
	}
	if namespace == "" {
		return
	}
	for _, b := range byName(bindingsFor(r.policy.roleBindings, keys, namespace+"/")) {
		rb := b.(*rbacv1.RoleBinding)
		if !r.visitRole(rb.RoleRef, namespace, visit) {
			return
		}
	}
}

func (r *RuleResolver) visitRole(ref rbacv1.RoleRef, namespace string, visit func(*rbacv1.PolicyRule, error) bool) bool {
	rules, err := r.GetRoleReferenceRules(context.Background(), ref, namespace)
	if err != nil {
		return visit(nil, err)
	}
	for i := range rules {
		if !visit(&rules[i], nil) {
			return false
		}
	}
	return true
}

// RulesFor is every rule bound to u in namespace (cluster-wide ones included). The
// error aggregates bindings whose role is missing; the other rules come with it.
func (r *RuleResolver) RulesFor(ctx context.Context, u user.Info, namespace string) ([]rbacv1.PolicyRule, error) {
	var rules []rbacv1.PolicyRule
	var errs []error
	r.VisitRulesFor(ctx, u, namespace, func(rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
		} else {
			rules = append(rules, *rule)
		}
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// GetRoleReferenceRules is the rules of the Role (in namespace) or ClusterRole ref names;
// a missing role is a NotFound error worded as kube's listers word it
// (`clusterrole.rbac.authorization.k8s.io "x" not found`). The rules are shared: callers
// must not change them.
func (r *RuleResolver) GetRoleReferenceRules(_ context.Context, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		obj, ok, err := r.policy.roles.GetByKey(namespace + "/" + ref.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("role"), ref.Name)
		}
		return obj.(*rbacv1.Role).Rules, nil
	case "ClusterRole":
		obj, ok, err := r.policy.clusterRoles.GetByKey(ref.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), ref.Name)
		}
		return obj.(*rbacv1.ClusterRole).Rules, nil
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// userKeys are the subject keys that name u: its user name, each group, and its service
// account when it is one (system:serviceaccount:<ns>:<name>).
func userKeys(u user.Info) []string {
	keys := make([]string, 0, 2+len(u.GetGroups()))
	keys = append(keys, subjectKey(rbacv1.UserKind, "", u.GetName()))
	for _, g := range u.GetGroups() {
		keys = append(keys, subjectKey(rbacv1.GroupKind, "", g))
	}
	if ns, name, err := serviceaccount.SplitUsername(u.GetName()); err == nil {
		keys = append(keys, subjectKey(rbacv1.ServiceAccountKind, ns, name))
	}
	return keys
}

// bindingsFor is the bindings indexed under any of keys (each prefixed), each once.
func bindingsFor(indexer cache.Indexer, keys []string, prefix string) []any {
	var out []any
	seen := map[any]bool{}
	for _, k := range keys {
		found, _ := indexer.ByIndex(subjectIndex, prefix+k)
		for _, b := range found {
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
	}
	return out
}

// byName sorts bindings by name, so rules are visited (and listed) in a stable order.
func byName(bindings []any) []any {
	name := func(b any) string {
		switch b := b.(type) {
		case *rbacv1.ClusterRoleBinding:
			return b.Name
		case *rbacv1.RoleBinding:
			return b.Name
		}
		return ""
	}
	sort.Slice(bindings, func(i, j int) bool { return name(bindings[i]) < name(bindings[j]) })
	return bindings
}

// RuleAllows reports whether rule allows the request: verb, API group, resource (with
// "resource/subresource" and "*/subresource" forms) and resourceNames for resource
// requests; verb and path (a trailing "*" matches a prefix) for the others. Mirrors
// rbac.RuleAllows.
func RuleAllows(attrs authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if !has(rule.Verbs, attrs.GetVerb()) {
		return false
	}
	if !attrs.IsResourceRequest() {
		return nonResourceURLMatches(rule.NonResourceURLs, attrs.GetPath())
	}
	resource, sub := attrs.GetResource(), attrs.GetSubresource()
	if sub != "" {
		resource += "/" + sub
	}
	return has(rule.APIGroups, attrs.GetAPIGroup()) &&
		resourceMatches(rule.Resources, resource, sub) &&
		(len(rule.ResourceNames) == 0 || contains(rule.ResourceNames, attrs.GetName()))
}

// has is true when values holds want or "*".
func has(values []string, want string) bool {
	for _, v := range values {
		if v == want || v == rbacv1.VerbAll {
			return true
		}
	}
	return false
}

func contains(values []string, want string) bool {
	for _, v := range values {
		if v == want {
			return true
		}
	}
	return false
}

func resourceMatches(ruleResources []string, resource, sub string) bool {
	for _, r := range ruleResources {
		switch {
		case r == rbacv1.ResourceAll, r == resource:
			return true
		case sub != "" && r == "*/"+sub:
			return true
		}
	}
	return false
}

func nonResourceURLMatches(ruleURLs []string, path string) bool {
	for _, u := range ruleURLs {
		switch {
		case u == rbacv1.NonResourceAll, u == path:
			return true
		case strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")):
			return true
		}
	}
	return false
}
