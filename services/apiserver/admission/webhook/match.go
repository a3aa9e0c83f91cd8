package webhook

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/registry/rest"
)

// shouldCall decides whether h is called for r: its namespaceSelector and objectSelector
// must match, one of its rules must match the request's resource (or, with matchPolicy
// Equivalent, an equivalent resource, in whose kind the objects are then sent), and its
// matchConditions must all hold. nil, nil means not called. Errors: the namespace
// lookup's (404 when the request's namespace does not exist), 500 for a selector that
// does not parse or an object that does not convert, 403 when a matchCondition fails to
// evaluate under failurePolicy Fail. Mirrors Webhook.ShouldCallHook.
func (w *Webhooks) shouldCall(ctx context.Context, h *hook, r *request) (*invocation, error) {
	nsMatches, nsErr := w.matchNamespaceSelector(ctx, h, r)
	if !nsMatches && nsErr == nil {
		return nil, nil
	}
	objMatches, objErr := matchObjectSelector(h, r)
	if !objMatches && objErr == nil {
		return nil, nil
	}
	var inv *invocation
	for _, rule := range h.rules {
		if ruleMatches(rule, r, r.Resource) {
			inv = &invocation{hook: h, resource: r.Resource, subresource: r.Subresource, kind: r.Kind, object: r.Object, oldObject: r.OldObject}
			break
		}
	}
	if inv == nil && h.matchPolicy == admissionregistrationv1.Equivalent && w.cfg.Equivalents != nil && r.Subresource == "" {
	equivalents:
		for _, eq := range w.cfg.Equivalents(r.Resource) {
			for _, rule := range h.rules {
				if !ruleMatches(rule, r, eq.Resource) {
					continue
				}
				obj, err := w.convert(r.Object, eq.Kind)
				if err != nil {
					return nil, apierrors.NewInternalError(err)
				}
				old, err := w.convert(r.OldObject, eq.Kind)
				if err != nil {
					return nil, apierrors.NewInternalError(err)
				}
				inv = &invocation{hook: h, resource: eq.Resource, kind: eq.Kind, object: obj, oldObject: old}
				break equivalents
			}
		}
	}
	switch {
	case inv == nil:
		return nil, nil
	case nsErr != nil:
		return nil, nsErr
	case objErr != nil:
		return nil, objErr
	}
	if len(h.matchConditions) > 0 {
		result := h.compiledMatcher().Match(ctx, inv.kubeAttributes(r), nil, w.cfg.Authorizer)
		if result.Error != nil {
			return nil, apierrors.NewForbidden(r.Resource.GroupResource(), r.Name, result.Error)
		}
		if !result.Matches {
			return nil, nil
		}
	}
	return inv, nil
}

// convert is obj (nil, or a typed object of the request's kind) as an object of kind.
func (w *Webhooks) convert(obj runtime.Object, kind schema.GroupVersionKind) (runtime.Object, error) {
	if obj == nil {
		return nil, nil
	}
	out, err := w.cfg.Scheme.New(kind)
	if err != nil {
		return nil, err
	}
	if err := w.cfg.Scheme.Convert(obj, out, nil); err != nil {
		return nil, fmt.Errorf("unable to convert to %v: %w", kind, err)
	}
	out.GetObjectKind().SetGroupVersionKind(kind)
	return out, nil
}

// ruleMatches reports whether rule covers the request's operation, scope and resource
// (as resource, the request's own or an equivalent one). Resources are "x", "x/sub",
// "x/*", "*/sub", "*" (every resource, no subresource) and "*/*". Mirrors rules.Matcher.
func ruleMatches(rule admissionregistrationv1.RuleWithOperations, r *request, resource schema.GroupVersionResource) bool {
	return scopeMatches(rule.Scope, r, resource) && operationMatches(rule.Operations, string(r.Operation)) &&
		exactOrWildcard(rule.APIGroups, resource.Group) && exactOrWildcard(rule.APIVersions, resource.Version) &&
		resourceMatches(rule.Resources, resource.Resource, r.Subresource)
}

func exactOrWildcard(items []string, requested string) bool {
	for _, item := range items {
		if item == "*" || item == requested {
			return true
		}
	}
	return false
}

// scopeMatches: Namespaced matches namespaced requests (not those of Namespaces, which
// are cluster-scoped); Cluster matches cluster-scoped ones and those of Namespaces.
func scopeMatches(scope *admissionregistrationv1.ScopeType, r *request, resource schema.GroupVersionResource) bool {
	if scope == nil || *scope == admissionregistrationv1.AllScopes {
		return true
	}
	switch *scope {
	case admissionregistrationv1.NamespacedScope:
		return resource != namespacesResource && r.namespace != metav1.NamespaceNone
	case admissionregistrationv1.ClusterScope:
		return resource == namespacesResource || r.namespace == metav1.NamespaceNone
	}
	return false
}

func operationMatches(ops []admissionregistrationv1.OperationType, op string) bool {
	for _, o := range ops {
		if o == admissionregistrationv1.OperationAll || string(o) == op {
			return true
		}
	}
	return false
}

func resourceMatches(resources []string, resource, subresource string) bool {
	for _, rs := range resources {
		res, sub, _ := strings.Cut(rs, "/")
		if (res == "*" || res == resource) && (sub == "*" || sub == subresource) {
			return true
		}
	}
	return false
}

// matchNamespaceSelector matches h's namespaceSelector against the labels of the
// request's namespace: a cluster-scoped request (but for a Namespace) always matches; a
// Namespace being created or updated is matched by its own new labels. Errors: 404 when
// the namespace does not exist, 500 for a selector that does not parse or a failed
// lookup. Mirrors namespace.Matcher.
func (w *Webhooks) matchNamespaceSelector(ctx context.Context, h *hook, r *request) (bool, error) {
	if r.namespace == "" && r.Resource != namespacesResource {
		return true, nil
	}
	if h.namespaceSelectorErr != nil {
		return false, apierrors.NewInternalError(h.namespaceSelectorErr)
	}
	if h.namespaceSelector.Empty() {
		return true, nil
	}
	nsLabels, err := w.namespaceLabels(ctx, r)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, err
		}
		return false, apierrors.NewInternalError(err)
	}
	return h.namespaceSelector.Matches(labels.Set(nsLabels)), nil
}

// namespaceLabels are the labels of the request's namespace: for a create or update of
// a Namespace, the new object's (the stored one is not there yet, or is about to
// change); otherwise the stored namespace's, from the watch cache, or etcd if the cache
// does not have it yet.
func (w *Webhooks) namespaceLabels(ctx context.Context, r *request) (map[string]string, error) {
	if r.Resource.GroupResource() == namespacesResource.GroupResource() && r.Subresource == "" && r.Object != nil {
		m, err := meta.Accessor(r.Object)
		if err != nil {
			return nil, err
		}
		return m.GetLabels(), nil
	}
	obj, err := rest.GetCachedFirst(ctx, w.cfg.Namespaces, "", r.namespace, nil)
	if err != nil {
		return nil, err
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, fmt.Errorf("namespace storage returned %T", obj)
	}
	return ns.Labels, nil
}

// matchObjectSelector matches h's objectSelector against the labels of the object or of
// the old object: either matching is enough. Errors: 500 for a selector that does not
// parse. Mirrors object.Matcher.
func matchObjectSelector(h *hook, r *request) (bool, error) {
	if h.objectSelectorErr != nil {
		return false, apierrors.NewInternalError(h.objectSelectorErr)
	}
	if h.objectSelector.Empty() {
		return true, nil
	}
	return objectLabelsMatch(r.Object, h.objectSelector) || objectLabelsMatch(r.OldObject, h.objectSelector), nil
}

func objectLabelsMatch(obj runtime.Object, selector labels.Selector) bool {
	if obj == nil {
		return false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return selector.Matches(labels.Set(m.GetLabels()))
}
