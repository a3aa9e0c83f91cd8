package serviceaccount

import (
	"time"

	"github.com/golang-jwt/jwt/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	apiserverserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// Claims are a service-account token's claims: the registered ones (iss, sub, aud, exp,
// iat, nbf, jti) and the private "kubernetes.io" claim. The JSON is kube's, so tokens
// read the same to tools that decode Kubernetes tokens.
type Claims struct {
	jwt.RegisteredClaims
	Kubernetes Kubernetes `json:"kubernetes.io,omitempty"`
}

// Kubernetes is the "kubernetes.io" private claim: what the token is for and bound to.
type Kubernetes struct {
	Namespace      string `json:"namespace,omitempty"`
	ServiceAccount Ref    `json:"serviceaccount,omitempty"`
	// Pod is set for a token bound to a pod; it dies with the pod.
	Pod *Ref `json:"pod,omitempty"`
	// Secret is set for a token bound to a secret; it dies with the secret.
	Secret *Ref `json:"secret,omitempty"`
	// Node is the node a bound pod runs on, for information (kube's
	// ServiceAccountTokenPodNodeInfo): the pod binding is what is checked.
	Node *Ref `json:"node,omitempty"`
}

// Ref names an object by name and UID.
type Ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Subject is the sub claim of a ServiceAccount's tokens, which is also its user name:
// system:serviceaccount:<namespace>:<name>.
func Subject(namespace, name string) string {
	return apiserverserviceaccount.MakeUsername(namespace, name)
}

// Binding says what a token is bound to besides its ServiceAccount: at most one of Pod
// and Secret; Node is the bound pod's node, when known.
type Binding struct {
	Pod    *corev1.Pod
	Secret *corev1.Secret
	Node   *corev1.Node
}

// NewClaims are the claims of a token for sa, valid from now for expiration, for
// audiences, bound to what binding names. Mirrors serviceaccount.Claims.
func NewClaims(sa *corev1.ServiceAccount, binding Binding, audiences []string, now time.Time, expiration time.Duration) *Claims {
	c := &Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   Subject(sa.Namespace, sa.Name),
			Audience:  jwt.ClaimStrings(audiences),
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(expiration)),
			ID:        string(uuid.NewUUID()),
		},
		Kubernetes: Kubernetes{
			Namespace:      sa.Namespace,
			ServiceAccount: Ref{Name: sa.Name, UID: string(sa.UID)},
		},
	}
	if p := binding.Pod; p != nil {
		c.Kubernetes.Pod = &Ref{Name: p.Name, UID: string(p.UID)}
	}
	if s := binding.Secret; s != nil {
		c.Kubernetes.Secret = &Ref{Name: s.Name, UID: string(s.UID)}
	}
	if n := binding.Node; n != nil {
		c.Kubernetes.Node = &Ref{Name: n.Name, UID: string(n.UID)}
	}
	return c
}
