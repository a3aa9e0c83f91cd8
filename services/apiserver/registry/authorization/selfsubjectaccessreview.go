// Package authorization serves the authorization.k8s.io/v1 reviews: a user asks whether
// it may do something (SelfSubjectAccessReview) or what it may do in a namespace
// (SelfSubjectRulesReview), or asks about another user (SubjectAccessReview,
// LocalSubjectAccessReview); the apiserver's own authorizer answers, so `kubectl auth
// can-i` tells exactly what a request would meet. Mirrors
// k8s.io/kubernetes/pkg/registry/authorization.
package authorization

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	authz "skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewSelfSubjectAccessReviewDescriptor serves selfsubjectaccessreviews, answered by
// authorizer.
func NewSelfSubjectAccessReviewDescriptor(authorizer authz.Authorizer) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: authorizationv1.SchemeGroupVersion,
		Resource:     "selfsubjectaccessreviews",
		SingularName: "selfsubjectaccessreview",
		Kind:         "SelfSubjectAccessReview",
		NewFunc:      func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
		REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return &SelfSubjectAccessReviewREST{Authorizer: authorizer}, nil, nil
		},
	}
}

// SelfSubjectAccessReviewREST answers SelfSubjectAccessReviews; it stores nothing.
type SelfSubjectAccessReviewREST struct {
	// Authorizer is the apiserver's authorizer.
	Authorizer authz.Authorizer
}

// New implements rest.Storage.
func (r *SelfSubjectAccessReviewREST) New() runtime.Object {
	return &authorizationv1.SelfSubjectAccessReview{}
}

// Create evaluates the review for the requesting user and returns it with status set.
// Errors: 422 when neither or both of resourceAttributes and nonResourceAttributes are
// given, 500 when there is no user (the authentication filter always sets one).
func (r *SelfSubjectAccessReviewREST) Create(ctx context.Context, _ string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectAccessReview: %T", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("no user in the request"))
	}
	ra, nra := review.Spec.ResourceAttributes, review.Spec.NonResourceAttributes
	if (ra == nil) == (nra == nil) {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "",
			field.ErrorList{field.Invalid(field.NewPath("spec", "resourceAttributes"), ra, "exactly one of nonResourceAttributes or resourceAttributes must be specified")})
	}
	attrs := authorizer.AttributesRecord{User: u}
	if ra != nil {
		attrs.Verb, attrs.Namespace, attrs.Name = ra.Verb, ra.Namespace, ra.Name
		attrs.APIGroup, attrs.APIVersion, attrs.Resource, attrs.Subresource = ra.Group, ra.Version, ra.Resource, ra.Subresource
		attrs.ResourceRequest = true
		if ra.FieldSelector != nil && ra.FieldSelector.RawSelector != "" {
			attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = authz.ParseFieldSelector(ra.FieldSelector.RawSelector)
		}
	} else {
		attrs.Verb, attrs.Path = nra.Verb, nra.Path
	}
	decision, reason, err := r.Authorizer.Authorize(ctx, attrs)
	out := review.DeepCopy()
	out.Status = authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		out.Status.EvaluationError = err.Error()
	}
	return out, nil
}
