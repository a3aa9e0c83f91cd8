package authentication

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/internal/pki"
)

// Bootstrap token Secrets, as kubeadm writes them (k8s.io/cluster-bootstrap/token/api).
const (
	// SecretTypeBootstrapToken is the type of a bootstrap token Secret.
	SecretTypeBootstrapToken = pki.SecretTypeBootstrapToken
	// BootstrapTokenSecretPrefix starts a bootstrap token Secret's name:
	// kube-system/bootstrap-token-<id>.
	BootstrapTokenSecretPrefix = pki.BootstrapTokenSecretPrefix
)

// SecretTokens authenticates `Authorization: Bearer <id>.<secret>` against the
// kube-system Secret bootstrap-token-<id> of type bootstrap.kubernetes.io/token, as
// kube-apiserver's bootstrap token authenticator does: data token-id and token-secret
// must match, usage-bootstrap-authentication must be "true", and expiration (RFC 3339),
// if present, must be ahead. auth-extra-groups adds groups (each must start with
// system:bootstrappers:). Mirrors k8s.io/kubernetes/plugin/pkg/auth/authenticator/token/bootstrap.
type SecretTokens struct {
	// Secrets reads secrets from storage (the secrets registry).
	Secrets rest.Getter
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// AuthenticateRequest implements Authenticator.
func (s *SecretTokens) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return nil, false, nil
	}
	id, secret, ok := pki.ParseBootstrapToken(strings.TrimSpace(token))
	if !ok {
		return nil, false, ErrInvalidToken
	}
	obj, err := s.Secrets.Get(r.Context(), metav1.NamespaceSystem, BootstrapTokenSecretPrefix+id, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		// The cache may not have a Secret created a moment ago: ask etcd.
		obj, err = s.Secrets.Get(r.Context(), metav1.NamespaceSystem, BootstrapTokenSecretPrefix+id, &metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, false, ErrInvalidToken
	}
	if err != nil {
		return nil, false, err
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok || sec.Type != SecretTypeBootstrapToken || sec.DeletionTimestamp != nil {
		return nil, false, ErrInvalidToken
	}
	if string(sec.Data[pki.BootstrapTokenIDKey]) != id || subtle.ConstantTimeCompare(sec.Data[pki.BootstrapTokenSecretKey], []byte(secret)) != 1 {
		return nil, false, ErrInvalidToken
	}
	if string(sec.Data[pki.BootstrapTokenUsagePrefix+"authentication"]) != "true" {
		return nil, false, ErrInvalidToken
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if _, expired := pki.BootstrapTokenSecretExpiration(sec, now()); expired {
		return nil, false, ErrInvalidToken
	}
	groups := []string{BootstrapGroup}
	for _, g := range strings.Split(string(sec.Data[pki.BootstrapTokenExtraGroupsKey]), ",") {
		if g = strings.TrimSpace(g); strings.HasPrefix(g, BootstrapGroup+":") {
			groups = append(groups, g)
		}
	}
	return &user.DefaultInfo{Name: BootstrapUserPrefix + id, Groups: append(groups, AuthenticatedGroup)}, true, nil
}
