package authorization

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewSelfSubjectRulesReviewDescriptor serves selfsubjectrulesreviews (behind `kubectl
// auth can-i --list`), answered by resolver.
func NewSelfSubjectRulesReviewDescriptor(resolver authorizer.RuleResolver) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: authorizationv1.SchemeGroupVersion,
		Resource:     "selfsubjectrulesreviews",
		SingularName: "selfsubjectrulesreview",
		Kind:         "SelfSubjectRulesReview",
		NewFunc:      func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
		REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &SelfSubjectRulesReviewREST{Resolver: resolver}, nil, nil
		},
	}
}

// SelfSubjectRulesReviewREST lists what the requesting user may do in a namespace; it
// stores nothing. Mirrors k8s.io/kubernetes/pkg/registry/authorization/
// selfsubjectrulesreview.
type SelfSubjectRulesReviewREST struct {
	// Resolver is the apiserver's authorizer's rule resolver.
	Resolver authorizer.RuleResolver
}

// New implements rest.Storage.
func (r *SelfSubjectRulesReviewREST) New() runtime.Object {
	return &authorizationv1.SelfSubjectRulesReview{}
}

// Create returns the review with status set: the resource and non-resource rules of the
// user in spec.namespace, incomplete when an authorizer cannot list its rules (the Node
// authorizer), and the resolution errors. Errors: 400 without spec.namespace.
func (r *SelfSubjectRulesReviewREST) Create(ctx context.Context, _ string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectRulesReview: %T", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	if review.Spec.Namespace == "" {
		return nil, apierrors.NewBadRequest("no namespace on request")
	}
	resourceInfo, nonResourceInfo, incomplete, err := r.Resolver.RulesFor(ctx, u, review.Spec.Namespace)
	out := &authorizationv1.SelfSubjectRulesReview{
		Spec: review.Spec,
		Status: authorizationv1.SubjectRulesReviewStatus{
			ResourceRules:    []authorizationv1.ResourceRule{},
			NonResourceRules: []authorizationv1.NonResourceRule{},
			Incomplete:       incomplete,
		},
	}
	for _, info := range resourceInfo {
		out.Status.ResourceRules = append(out.Status.ResourceRules, authorizationv1.ResourceRule{
			Verbs: info.GetVerbs(), APIGroups: info.GetAPIGroups(), Resources: info.GetResources(), ResourceNames: info.GetResourceNames()})
	}
	for _, info := range nonResourceInfo {
		out.Status.NonResourceRules = append(out.Status.NonResourceRules, authorizationv1.NonResourceRule{
			Verbs: info.GetVerbs(), NonResourceURLs: info.GetNonResourceURLs()})
	}
	if err != nil {
		out.Status.EvaluationError = err.Error()
	}
	return out, nil
}
