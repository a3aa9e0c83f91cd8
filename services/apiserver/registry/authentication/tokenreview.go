package authentication

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// NewTokenReviewDescriptor serves tokenreviews through r: whether a bearer token
// authenticates at this apiserver, and as whom (kube-apiserver's
// webhook-token-authentication API). Components ask it about the tokens their own
// callers present (kube's delegated authentication).
func NewTokenReviewDescriptor(r *TokenReviewREST) registry.Descriptor {
	return registry.Descriptor{
		GroupVersion: authenticationv1.SchemeGroupVersion,
		Resource:     "tokenreviews",
		SingularName: "tokenreview",
		Kind:         "TokenReview",
		NewFunc:      func() runtime.Object { return &authenticationv1.TokenReview{} },
		REST: func(*registry.Store, registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
			return r, nil, nil
		},
	}
}

// Authenticator finds the user of a request: ok is false when it carries no credential
// the authenticator knows; err when it carries one that proves nothing. The apiserver's
// authentication.Union is one.
type Authenticator interface {
	AuthenticateRequest(r *http.Request) (info user.Info, ok bool, err error)
}

// TokenReviewREST answers TokenReviews; it stores nothing. Mirrors
// k8s.io/kubernetes/pkg/registry/authentication/tokenreview.
type TokenReviewREST struct {
	// Authenticator is the apiserver's own; it sees a request that carries nothing but
	// `Authorization: Bearer <spec.token>`. Set before the first review is served.
	Authenticator Authenticator
	// APIAudiences are the apiserver's audiences (--api-audiences): every token it
	// authenticates is checked against them.
	APIAudiences []string
}

// New implements rest.Storage.
func (r *TokenReviewREST) New() runtime.Object { return &authenticationv1.TokenReview{} }

// Create returns the review with its status: authenticated and user for a token the
// apiserver accepts, else authenticated false and, where one was found, error (e.g.
// "invalid bearer token"). status.audiences are the audiences the token was checked
// against: spec.audiences among the apiserver's, or the apiserver's when spec names
// none. A review whose spec.audiences holds none of the apiserver's is not
// authenticated: tokens minted for other audiences are not verified here. Errors: 400
// for no spec.token.
func (r *TokenReviewREST) Create(ctx context.Context, _ string, obj runtime.Object, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.TokenReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenReview: %T", obj))
	}
	if review.Spec.Token == "" {
		return nil, apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	out := review.DeepCopy()
	audiences := r.APIAudiences
	if len(review.Spec.Audiences) > 0 {
		audiences = nil
		for _, a := range review.Spec.Audiences {
			if slices.Contains(r.APIAudiences, a) && !slices.Contains(audiences, a) {
				audiences = append(audiences, a)
			}
		}
		if len(audiences) == 0 {
			out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return out, nil
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req.Header.Set("Authorization", "Bearer "+review.Spec.Token)
	u, ok, err := r.Authenticator.AuthenticateRequest(req)
	out.Status = authenticationv1.TokenReviewStatus{Authenticated: ok}
	switch {
	case ok:
		out.Status.User = userInfo(u)
		out.Status.Audiences = audiences
	case err != nil:
		out.Status.Error = err.Error()
	default:
		out.Status.Error = "invalid bearer token"
	}
	return out, nil
}

// userInfo is u as the authentication API writes a user.
func userInfo(u user.Info) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if extra := u.GetExtra(); len(extra) > 0 {
		info.Extra = make(map[string]authenticationv1.ExtraValue, len(extra))
		for k, v := range extra {
			info.Extra[k] = v
		}
	}
	return info
}
