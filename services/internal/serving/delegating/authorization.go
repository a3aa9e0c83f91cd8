package delegating

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// DefaultAlwaysAllowPaths are the paths anyone may GET without a SubjectAccessReview,
// so that probes need no credential (--authorization-always-allow-paths' default).
var DefaultAlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// DefaultAlwaysAllowGroups are the groups allowed everything without a
// SubjectAccessReview: the apiserver would allow system:masters anyway.
var DefaultAlwaysAllowGroups = []string{user.SystemPrivilegedGroup}

// AuthorizerConfig is what NewAuthorizer needs.
type AuthorizerConfig struct {
	// SubjectAccessReviews asks the apiserver whether a user may do something; nil
	// refuses whatever AlwaysAllowPaths and AlwaysAllowGroups do not allow.
	SubjectAccessReviews authorizationv1client.SubjectAccessReviewInterface
	// AllowCacheTTL is how long an allowing answer is reused; 0 means
	// DefaultAllowCacheTTL.
	AllowCacheTTL time.Duration
	// DenyCacheTTL is how long any other answer is reused; 0 means DefaultDenyCacheTTL.
	DenyCacheTTL time.Duration
	// AlwaysAllowPaths are allowed to every caller, anonymous included: each a path, or a
	// prefix ending in "*" (k8s.io/apiserver/pkg/authorization/path).
	AlwaysAllowPaths []string
	// AlwaysAllowGroups are allowed every request.
	AlwaysAllowGroups []string
}

// NewAuthorizer decides whether a request may proceed: allowed for a member of
// AlwaysAllowGroups, for a path of AlwaysAllowPaths, else as the apiserver answers a
// SubjectAccessReview of the user's name, UID, groups and extra for the request's verb
// and path (or resource). Mirrors kube's DelegatingAuthorizationOptions.toAuthorizer.
// Errors: a malformed AlwaysAllowPaths entry ("*" other than at its end).
func NewAuthorizer(cfg AuthorizerConfig) (authorizer.Authorizer, error) {
	var chain []union.NamedAuthorizer
	if len(cfg.AlwaysAllowGroups) > 0 {
		chain = append(chain, union.NamedAuthorizer{AuthorizerName: "kubernetes.io/always-allow-groups", Authorizer: authorizer.AuthorizerFunc(privilegedGroups(cfg.AlwaysAllowGroups).Authorize)})
	}
	if len(cfg.AlwaysAllowPaths) > 0 {
		a, err := path.NewAuthorizer(cfg.AlwaysAllowPaths)
		if err != nil {
			return nil, fmt.Errorf("always-allow paths: %w", err)
		}
		chain = append(chain, union.NamedAuthorizer{AuthorizerName: "kubernetes.io/always-allow-paths", Authorizer: a})
	}
	if cfg.SubjectAccessReviews != nil {
		s := &subjectAccessReviewer{reviews: cfg.SubjectAccessReviews, allowTTL: cfg.AllowCacheTTL, denyTTL: cfg.DenyCacheTTL, cache: cache.NewLRUExpireCache(cacheSize)}
		if s.allowTTL == 0 {
			s.allowTTL = DefaultAllowCacheTTL
		}
		if s.denyTTL == 0 {
			s.denyTTL = DefaultDenyCacheTTL
		}
		chain = append(chain, union.NamedAuthorizer{AuthorizerName: "kubernetes.io/webhook", Authorizer: authorizer.AuthorizerFunc(s.Authorize)})
	}
	return union.New(chain...)
}

// privilegedGroups allows every request of a member of one of its groups. Mirrors
// authorizerfactory.NewPrivilegedGroups.
type privilegedGroups []string

// Authorize implements authorizer.Authorizer.
func (p privilegedGroups) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil {
		for _, g := range u.GetGroups() {
			if slices.Contains(p, g) {
				return authorizer.DecisionAllow, "", nil
			}
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// subjectAccessReviewer asks the apiserver and keeps each answer for allowTTL or
// denyTTL, keyed by the whole review spec; a failed review is not kept. Mirrors kube's
// webhook authorizer (plugin/pkg/authorizer/webhook) as the delegating authorizer
// configures it.
type subjectAccessReviewer struct {
	reviews           authorizationv1client.SubjectAccessReviewInterface
	allowTTL, denyTTL time.Duration
	cache             *cache.LRUExpireCache
}

// Authorize implements authorizer.Authorizer. Errors: the review could not be made.
func (s *subjectAccessReviewer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	review := &authorizationv1.SubjectAccessReview{}
	if u := a.GetUser(); u != nil {
		review.Spec = authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
		if extra := u.GetExtra(); len(extra) > 0 {
			review.Spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				review.Spec.Extra[k] = v
			}
		}
	}
	if a.IsResourceRequest() {
		review.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: a.GetNamespace(), Verb: a.GetVerb(), Group: a.GetAPIGroup(), Version: a.GetAPIVersion(),
			Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName(),
		}
	} else {
		review.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.GetPath(), Verb: a.GetVerb()}
	}
	key, err := json.Marshal(review.Spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	var status authorizationv1.SubjectAccessReviewStatus
	if v, ok := s.cache.Get(string(key)); ok {
		status = v.(authorizationv1.SubjectAccessReviewStatus)
	} else {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		out, err := s.reviews.Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return authorizer.DecisionNoOpinion, "", fmt.Errorf("SubjectAccessReview: %w", err)
		}
		status = out.Status
		ttl := s.denyTTL
		if status.Allowed {
			ttl = s.allowTTL
		}
		s.cache.Add(string(key), status, ttl)
	}
	switch {
	case status.Denied && status.Allowed:
		return authorizer.DecisionDeny, status.Reason, fmt.Errorf("SubjectAccessReview returned both allow and deny")
	case status.Denied:
		return authorizer.DecisionDeny, status.Reason, nil
	case status.Allowed:
		return authorizer.DecisionAllow, status.Reason, nil
	}
	return authorizer.DecisionNoOpinion, status.Reason, nil
}
