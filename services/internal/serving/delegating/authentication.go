// Package delegating decides who may read a component's own endpoints (/metrics,
// /debug/pprof, /healthz) on its secure port by asking the apiserver, as kube-scheduler
// and kube-controller-manager do: a client certificate is checked against the cluster CA
// here, a bearer token through a TokenReview, and whether the caller may GET the path
// through a SubjectAccessReview, each answer cached for seconds. Mirrors
// k8s.io/apiserver's authenticatorfactory.DelegatingAuthenticatorConfig and
// authorizerfactory.DelegatingAuthorizerConfig with the defaults of
// k8s.io/apiserver/pkg/server/options' DelegatingAuthentication/AuthorizationOptions,
// written on client-go because those packages bring in kube-apiserver's audit, egress
// selector, CEL and component-base's global metrics registry.
package delegating

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/user"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// Defaults of kube's DelegatingAuthenticationOptions and DelegatingAuthorizationOptions.
const (
	// DefaultTokenCacheTTL is how long a TokenReview's answer is reused
	// (--authentication-token-webhook-cache-ttl).
	DefaultTokenCacheTTL = 10 * time.Second
	// DefaultAllowCacheTTL is how long an allowing SubjectAccessReview is reused
	// (--authorization-webhook-cache-authorized-ttl).
	DefaultAllowCacheTTL = 10 * time.Second
	// DefaultDenyCacheTTL is how long a refusing one is reused
	// (--authorization-webhook-cache-unauthorized-ttl).
	DefaultDenyCacheTTL = 10 * time.Second
	// reviewTimeout bounds one TokenReview or SubjectAccessReview (kube's
	// TokenAccessReviewTimeout and ClientTimeout).
	reviewTimeout = 10 * time.Second
	// cacheSize is how many answers each cache keeps (kube's webhook authorizer's).
	cacheSize = 8192
)

// AuthenticatorConfig is what NewAuthenticator needs.
type AuthenticatorConfig struct {
	// ClientCA verifies client certificates, which must be valid for client
	// authentication; nil accepts none.
	ClientCA *x509.CertPool
	// TokenReviews asks the apiserver who a bearer token belongs to; nil accepts no
	// token.
	TokenReviews authenticationv1client.TokenReviewInterface
	// CacheTTL is how long an answer of TokenReviews is reused; 0 means
	// DefaultTokenCacheTTL.
	CacheTTL time.Duration
}

// NewAuthenticator finds who sent a request: the user of a client certificate ClientCA
// verifies (user = CommonName, groups = Organizations), else of a bearer token the
// apiserver vouches for, with system:authenticated added; a request with neither is
// system:anonymous in system:unauthenticated, left to the authorizer. A certificate
// that does not verify or a token the apiserver does not accept is an error (the caller
// answers 401), unless the other credential proves a user. Mirrors kube's delegating
// authenticator with anonymous authentication on, as kube-scheduler and
// kube-controller-manager run it.
func NewAuthenticator(cfg AuthenticatorConfig) authenticator.Request {
	var a anonymousUnion
	if cfg.ClientCA != nil {
		a = append(a, clientCertificates{roots: cfg.ClientCA})
	}
	if cfg.TokenReviews != nil {
		ttl := cfg.CacheTTL
		if ttl == 0 {
			ttl = DefaultTokenCacheTTL
		}
		a = append(a, bearertoken.New(&tokenReviewer{reviews: cfg.TokenReviews, ttl: ttl, cache: cache.NewLRUExpireCache(cacheSize)}))
	}
	return a
}

// anonymousUnion tries each authenticator and returns the first user proved, with
// system:authenticated; failing that, the errors; with neither, the anonymous user.
// Mirrors kube's union.NewFailOnError(group.NewAuthenticatedGroupAdder(union), anonymous).
type anonymousUnion []authenticator.Request

// AuthenticateRequest implements authenticator.Request.
func (u anonymousUnion) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	var errs []error
	for _, a := range u {
		resp, ok, err := a.AuthenticateRequest(r)
		if ok {
			return withAuthenticatedGroup(resp), true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, false, utilerrors.NewAggregate(errs)
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
}

// withAuthenticatedGroup is resp with system:authenticated among its user's groups.
func withAuthenticatedGroup(resp *authenticator.Response) *authenticator.Response {
	u := resp.User
	if slices.Contains(u.GetGroups(), user.AllAuthenticated) {
		return resp
	}
	out := *resp
	out.User = &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Extra: u.GetExtra(),
		Groups: append(slices.Clone(u.GetGroups()), user.AllAuthenticated)}
	return &out
}

// clientCertificates authenticates the client certificate of a TLS request by
// verifying it against roots here, so that a server asking for certificates
// (tls.RequestClientCert) can answer an unverifiable one with 401 rather than a failed
// handshake. Mirrors k8s.io/apiserver/pkg/authentication/request/x509 with
// CommonNameUserConversion.
type clientCertificates struct {
	roots *x509.CertPool
}

// AuthenticateRequest implements authenticator.Request.
func (c clientCertificates) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: c.roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, cert := range r.TLS.PeerCertificates[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, false, fmt.Errorf("verifying certificate of %q (serial %s) failed: %w", leaf.Subject.CommonName, leaf.SerialNumber, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: slices.Clone(leaf.Subject.Organization)}}, true, nil
}

// tokenReviewer asks the apiserver who a token belongs to and keeps each definite
// answer (authenticated or not) for ttl; a failed review is not kept. Mirrors kube's
// webhook token authenticator behind token/cache with the delegating defaults.
type tokenReviewer struct {
	reviews authenticationv1client.TokenReviewInterface
	ttl     time.Duration
	// cache maps a token's SHA-256, never the token itself, to its tokenAnswer.
	cache *cache.LRUExpireCache
}

// tokenAnswer is a TokenReview's verdict.
type tokenAnswer struct {
	user user.Info // nil: not authenticated
	err  error     // the review's status.error, when not authenticated
}

// AuthenticateToken implements authenticator.Token.
func (t *tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := t.cache.Get(key); ok {
		return v.(tokenAnswer).response()
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := t.reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("TokenReview: %w", err)
	}
	var answer tokenAnswer
	if st := review.Status; st.Authenticated {
		var extra map[string][]string
		if st.User.Extra != nil {
			extra = make(map[string][]string, len(st.User.Extra))
			for k, v := range st.User.Extra {
				extra[k] = v
			}
		}
		answer.user = &user.DefaultInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: extra}
	} else if st.Error != "" {
		answer.err = errors.New(st.Error)
	}
	if answer.err == nil {
		t.cache.Add(key, answer, t.ttl)
	}
	return answer.response()
}

func (a tokenAnswer) response() (*authenticator.Response, bool, error) {
	if a.user == nil {
		return nil, false, a.err
	}
	return &authenticator.Response{User: a.user}, true, nil
}
