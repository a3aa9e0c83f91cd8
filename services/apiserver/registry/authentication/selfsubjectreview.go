// Package authentication serves authentication.k8s.io/v1 SelfSubjectReview, where the
// apiserver tells a user who it authenticated them as (`kubectl auth whoami`), and
// TokenReview, where it tells a component who a bearer token belongs to. Mirrors
// k8s.io/kubernetes/pkg/registry/authentication/selfsubjectreview and tokenreview.
package authentication

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves selfsubjectreviews.
var Descriptor = registry.Descriptor{
	GroupVersion: authenticationv1.SchemeGroupVersion,
	Resource:     "selfsubjectreviews",
	SingularName: "selfsubjectreview",
	Kind:         "SelfSubjectReview",
	NewFunc:      func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
	REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return SelfSubjectReviewREST{}, nil, nil
	},
}

// SelfSubjectReviewREST answers SelfSubjectReviews; it stores nothing.
type SelfSubjectReviewREST struct{}

// New implements rest.Storage.
func (SelfSubjectReviewREST) New() runtime.Object { return &authenticationv1.SelfSubjectReview{} }

// Create returns the review with status.userInfo set to the requesting user.
func (SelfSubjectReviewREST) Create(ctx context.Context, _ string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.SelfSubjectReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectReview: %T", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("no user in the request"))
	}
	out := review.DeepCopy()
	out.Status.UserInfo = userInfo(u)
	return out, nil
}
