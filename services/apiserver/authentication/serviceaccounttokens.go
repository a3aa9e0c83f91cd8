package authentication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	apiserverserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
	tokenjwt "k8s.io/apiserver/pkg/authentication/token/jwt"
	"k8s.io/apiserver/pkg/authentication/user"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/serviceaccount"
)

// ServiceAccountTokens authenticates `Authorization: Bearer <jwt>` holding a
// service-account token this apiserver issued (TokenRequest): the user is
// system:serviceaccount:<namespace>:<name> in groups system:serviceaccounts,
// system:serviceaccounts:<namespace> and system:authenticated, with the pod it is bound
// to (authentication.kubernetes.io/pod-name, pod-uid) and the token's credential-id
// (JTI=<jti>) as extra. Besides the signature, expiry and audience, a token is refused
// once its ServiceAccount, or the Pod or Secret it is bound to, is gone or was recreated
// (another UID). Mirrors k8s.io/kubernetes/pkg/serviceaccount's JWTTokenAuthenticator
// with its legacy-free validator (lookup.go).
type ServiceAccountTokens struct {
	// Verifier checks signature, issuer, expiry and audience.
	Verifier *serviceaccount.Verifier
	// ServiceAccounts, Pods and Secrets read from storage (the registries).
	ServiceAccounts, Pods, Secrets rest.Getter
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// boundPodGracePeriod is how long a token bound to a pod still works after the pod's
// deletionTimestamp, as kube's validator allows (pods in graceful termination).
const boundPodGracePeriod = 60 * time.Second

// AuthenticateRequest implements Authenticator. A bearer token that is not a JWT of
// this issuer is left to the other authenticators (ok false, no error); one that is but
// fails a check is ErrInvalidToken.
func (s *ServiceAccountTokens) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return nil, false, nil
	}
	claims, err := s.Verifier.Verify(strings.TrimSpace(token))
	if errors.Is(err, serviceaccount.ErrNotOurs) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	info, err := s.validate(r.Context(), claims)
	if err != nil {
		return nil, false, err
	}
	u := info.UserInfo().(*user.DefaultInfo)
	u.Groups = append(u.Groups, AuthenticatedGroup)
	return u, true, nil
}

// validate checks that what the claims name still exists, as the token saw it.
func (s *ServiceAccountTokens) validate(ctx context.Context, claims *serviceaccount.Claims) (*apiserverserviceaccount.ServiceAccountInfo, error) {
	k := claims.Kubernetes
	ns := k.Namespace
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
	}
	sa, err := getCurrent(ctx, s.ServiceAccounts, ns, k.ServiceAccount.Name, k.ServiceAccount.UID)
	if err != nil {
		return nil, err
	}
	if sa == nil {
		return nil, invalid("service account %s/%s has been deleted", ns, k.ServiceAccount.Name)
	}
	saMeta, _ := meta.Accessor(sa)
	if string(saMeta.GetUID()) != k.ServiceAccount.UID {
		return nil, invalid("service account UID (%s) does not match claim (%s)", saMeta.GetUID(), k.ServiceAccount.UID)
	}
	if saMeta.GetDeletionTimestamp() != nil {
		return nil, invalid("service account %s/%s is being deleted", ns, k.ServiceAccount.Name)
	}
	info := &apiserverserviceaccount.ServiceAccountInfo{
		Namespace: ns, Name: k.ServiceAccount.Name, UID: k.ServiceAccount.UID,
		CredentialID: tokenjwt.CredentialIDForJTI(claims.ID),
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if ref := k.Pod; ref != nil {
		obj, err := getCurrent(ctx, s.Pods, ns, ref.Name, ref.UID)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			return nil, invalid("pod %s/%s has been deleted", ns, ref.Name)
		}
		pod := obj.(*corev1.Pod)
		if string(pod.UID) != ref.UID {
			return nil, invalid("pod UID (%s) does not match claim (%s)", pod.UID, ref.UID)
		}
		if pod.DeletionTimestamp != nil && pod.DeletionTimestamp.Time.Before(now().Add(-boundPodGracePeriod)) {
			return nil, invalid("pod %s/%s is marked for deletion", ns, ref.Name)
		}
		info.PodName, info.PodUID = ref.Name, ref.UID
	}
	if ref := k.Secret; ref != nil {
		obj, err := getCurrent(ctx, s.Secrets, ns, ref.Name, ref.UID)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			return nil, invalid("secret %s/%s has been deleted", ns, ref.Name)
		}
		secret := obj.(*corev1.Secret)
		if string(secret.UID) != ref.UID {
			return nil, invalid("secret UID (%s) does not match claim (%s)", secret.UID, ref.UID)
		}
		if secret.DeletionTimestamp != nil {
			return nil, invalid("secret %s/%s is being deleted", ns, ref.Name)
		}
	}
	if ref := k.Node; ref != nil && k.Pod != nil {
		info.NodeName, info.NodeUID = ref.Name, ref.UID
	}
	return info, nil
}

// getCurrent reads namespace/name from the watch cache and, when the cache does not
// have it with wantUID (it may lag a write by a moment), from etcd. It returns nil for
// an object that does not exist; err is a storage failure.
func getCurrent(ctx context.Context, getter rest.Getter, namespace, name, wantUID string) (runtime.Object, error) {
	obj, err := rest.GetCachedFirst(ctx, getter, namespace, name, func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		return err == nil && string(m.GetUID()) == wantUID
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}
