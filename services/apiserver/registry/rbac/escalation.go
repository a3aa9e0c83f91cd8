// Package rbac holds what the four rbac.authorization.k8s.io resources share in the
// registry: the escalation check a write of a role or binding must pass. A user may only
// grant permissions it holds itself, unless it may "escalate" on the role resource or
// "bind" the referenced role. Mirrors k8s.io/kubernetes/pkg/registry/rbac
// (escalation_check.go) and pkg/registry/rbac/validation (ConfirmNoEscalation).
package rbac

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// Authorizer is the apiserver's authorizer, asked about "escalate" and "bind".
type Authorizer interface {
	Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
}

// RuleResolver finds the RBAC rules a user holds. Mirrors kube's
// validation.AuthorizationRuleResolver.
type RuleResolver interface {
	// RulesFor is every rule user holds in namespace: its ClusterRoleBindings' rules and,
	// when namespace is set, its RoleBindings' rules there. The error lists what could not
	// be resolved (a binding to a missing role); the rules that could be are returned
	// with it.
	RulesFor(ctx context.Context, u user.Info, namespace string) ([]rbacv1.PolicyRule, error)
	// GetRoleReferenceRules is the rules of the role ref points to, from a binding in
	// namespace ("" for a ClusterRoleBinding).
	GetRoleReferenceRules(ctx context.Context, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error)
}

// Guard runs the escalation check on writes of roles and bindings.
type Guard struct {
	Authorizer Authorizer
	Resolver   RuleResolver
}

// fullAuthority is cluster-admin's rules: what it takes to set an aggregationRule, which
// can gather any permission.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// EscalationAllowed is true for system:masters, which may do anything anyway.
func EscalationAllowed(ctx context.Context) bool {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return true
		}
	}
	return false
}

// allowed asks the authorizer about attrs for the request's user.
func (g *Guard) allowed(ctx context.Context, attrs authorizer.AttributesRecord) bool {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || g.Authorizer == nil {
		return false
	}
	attrs.User, attrs.ResourceRequest = u, true
	decision, _, err := g.Authorizer.Authorize(ctx, attrs)
	return err == nil && decision == authorizer.DecisionAllow
}

// ConfirmRole lets a write of role gr/namespace/name granting rules through when the
// user is in system:masters, may "escalate" on the role, or holds every rule itself
// (and, with aggregation, holds cluster-admin's rules: aggregation can gather anything).
// Otherwise it returns 403 Forbidden naming what the user lacks.
func (g *Guard) ConfirmRole(ctx context.Context, gr schema.GroupResource, namespace, name string, rules []rbacv1.PolicyRule, aggregation bool) error {
	if EscalationAllowed(ctx) || g.allowed(ctx, authorizer.AttributesRecord{
		Verb: "escalate", APIGroup: gr.Group, APIVersion: "*", Resource: gr.Resource, Namespace: namespace, Name: name,
	}) {
		return nil
	}
	if err := g.confirmNoEscalation(ctx, namespace, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	if aggregation {
		if err := g.confirmNoEscalation(ctx, namespace, fullAuthority); err != nil {
			return apierrors.NewForbidden(gr, name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
		}
	}
	return nil
}

// ConfirmBinding lets a write of binding gr/namespace/name to ref through when the user
// is in system:masters, may "bind" the referenced role, or holds every rule of that role
// itself. Otherwise it returns 403 Forbidden.
func (g *Guard) ConfirmBinding(ctx context.Context, gr schema.GroupResource, namespace, name string, ref rbacv1.RoleRef) error {
	if EscalationAllowed(ctx) {
		return nil
	}
	attrs := authorizer.AttributesRecord{Verb: "bind", APIGroup: ref.APIGroup, Namespace: namespace, Name: ref.Name}
	switch ref.Kind {
	case "ClusterRole":
		attrs.Resource = "clusterroles"
	case "Role":
		attrs.Resource = "roles"
	}
	if attrs.Resource != "" && g.allowed(ctx, attrs) {
		return nil
	}
	if g.Resolver == nil {
		return apierrors.NewForbidden(gr, name, errors.New("no RBAC rule resolver"))
	}
	rules, err := g.Resolver.GetRoleReferenceRules(ctx, ref, namespace)
	if err != nil {
		return err // e.g. 404: clusterrole.rbac.authorization.k8s.io "x" not found
	}
	if err := g.confirmNoEscalation(ctx, namespace, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}

// confirmNoEscalation fails unless the user's own rules in namespace cover rules.
// Mirrors ConfirmNoEscalation, message included.
func (g *Guard) confirmNoEscalation(ctx context.Context, namespace string, rules []rbacv1.PolicyRule) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return errors.New("no user on context")
	}
	if g.Resolver == nil {
		return errors.New("no RBAC rule resolver")
	}
	owner, resolveErr := g.Resolver.RulesFor(ctx, u, namespace)
	covered, missing := validation.Covers(owner, rules)
	if covered {
		return nil
	}
	var lines []string
	seen := map[string]bool{}
	for _, r := range compactRules(missing) {
		s := CompactString(r)
		if !seen[s] {
			seen[s] = true
			lines = append(lines, s)
		}
	}
	sort.Strings(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", resolveErr)
	}
	return errors.New(msg)
}

// compactRules merges rules that differ only in verbs and name one group, one resource
// and at most one resourceName, so the missing permissions read as a few lines.
// Mirrors validation.CompactRules.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type simple struct{ group, resource, name string }
	var out []rbacv1.PolicyRule
	merged := map[simple]int{}
	for _, r := range rules {
		if len(r.APIGroups) == 1 && len(r.Resources) == 1 && len(r.ResourceNames) <= 1 && len(r.NonResourceURLs) == 0 {
			key := simple{r.APIGroups[0], r.Resources[0], ""}
			if len(r.ResourceNames) == 1 {
				key.name = r.ResourceNames[0]
			}
			if i, ok := merged[key]; ok {
				out[i].Verbs = append(out[i].Verbs, r.Verbs...)
				continue
			}
			merged[key] = len(out)
		}
		out = append(out, *r.DeepCopy())
	}
	return out
}

// CompactString renders a rule as kube's messages do:
// {APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}. Mirrors
// rbacv1helpers.CompactString.
func CompactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, values []string) {
		if len(values) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, values))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}

// IsOnlyMutatingGCFields is true when obj differs from old only in ownerReferences and
// finalizers: the garbage collector may make such updates without the escalation check.
// Mirrors rbacregistry.IsOnlyMutatingGCFields.
func IsOnlyMutatingGCFields(obj, old runtime.Object) bool {
	if old == nil || obj == nil {
		return false
	}
	copied := obj.DeepCopyObject()
	copiedMeta, err := meta.Accessor(copied)
	if err != nil {
		return false
	}
	oldMeta, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	copiedMeta.SetOwnerReferences(oldMeta.GetOwnerReferences())
	copiedMeta.SetFinalizers(oldMeta.GetFinalizers())
	copiedMeta.SetResourceVersion(oldMeta.GetResourceVersion())
	return apiequality.Semantic.DeepEqual(copied, old) || reflect.DeepEqual(copied, old)
}
