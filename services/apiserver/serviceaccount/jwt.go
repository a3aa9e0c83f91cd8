// Package serviceaccount issues and verifies service-account tokens: JWTs signed with the
// cluster's service-account key (pki's sa.key) that name a ServiceAccount and, for bound
// tokens, the Pod or Secret they are bound to. It knows nothing of storage: the
// authenticator checks that what a token names still exists. Mirrors
// k8s.io/kubernetes/pkg/serviceaccount (jwt.go, claims.go).
package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"skiff.dev/services/internal/pki"
)

// DefaultIssuer is the issuer (iss) of skiff's tokens and, unless configured otherwise,
// the audience the apiserver accepts: the value kubeadm gives --service-account-issuer.
const DefaultIssuer = "https://kubernetes.default.svc.cluster.local"

// Signer signs tokens with one private key. Mirrors serviceaccount.JWTTokenGenerator.
type Signer struct {
	issuer string
	method jwt.SigningMethod
	key    crypto.Signer
	keyID  string
}

// NewSigner signs tokens as issuer with key: RSA keys sign RS256, ECDSA P-256, P-384 and
// P-521 keys ES256, ES384 and ES512. Errors: an empty issuer or another key type.
func NewSigner(issuer string, key crypto.Signer) (*Signer, error) {
	if issuer == "" {
		return nil, errors.New("serviceaccount: an issuer is required")
	}
	method, err := signingMethod(key.Public())
	if err != nil {
		return nil, err
	}
	keyID, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	return &Signer{issuer: issuer, method: method, key: key, keyID: keyID}, nil
}

// ReadSigner is NewSigner with the private key in the PEM file path (sa.key).
func ReadSigner(issuer, path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("service-account signing key: %w", err)
	}
	key, err := pki.ParseKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("service-account signing key %s: %w", path, err)
	}
	return NewSigner(issuer, key)
}

// Issuer is the iss of the tokens s signs.
func (s *Signer) Issuer() string { return s.issuer }

// Sign returns claims as a compact JWT ("header.payload.signature") with the key ID
// (kid) in its header. It sets claims.Issuer.
func (s *Signer) Sign(claims *Claims) (string, error) {
	claims.Issuer = s.issuer
	token := jwt.NewWithClaims(s.method, claims)
	token.Header["kid"] = s.keyID
	return token.SignedString(s.key)
}

// Verifier checks a token's signature, issuer, lifetime and audience. Mirrors the
// signature and standard-claim half of serviceaccount.JWTTokenAuthenticator.
type Verifier struct {
	issuer    string
	audiences []string
	keys      []crypto.PublicKey
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewVerifier accepts tokens from issuer, signed by one of keys, for at least one of
// audiences (kube-apiserver's --api-audiences).
func NewVerifier(issuer string, audiences []string, keys []crypto.PublicKey) *Verifier {
	return &Verifier{issuer: issuer, audiences: audiences, keys: keys}
}

// ReadVerifier is NewVerifier with the public keys in the PEM file path (sa.pub).
func ReadVerifier(issuer string, audiences []string, path string) (*Verifier, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("service-account public key: %w", err)
	}
	keys, err := pki.ParsePublicKeysPEM(data)
	if err != nil {
		return nil, fmt.Errorf("service-account public key %s: %w", path, err)
	}
	return NewVerifier(issuer, audiences, keys), nil
}

// Errors Verify returns besides the library's own.
var (
	// ErrNotOurs is a token that is not a JWT, or one another issuer made: another
	// authenticator may know it.
	ErrNotOurs = errors.New("not a token of this issuer")
)

// Verify returns the claims of a token this verifier accepts. Errors: ErrNotOurs for a
// bearer token that is not a JWT or has another iss; otherwise an error saying which
// check failed (signature, expired, not yet valid, audience, missing claims).
func (v *Verifier) Verify(token string) (*Claims, error) {
	if strings.Count(token, ".") != 2 {
		return nil, ErrNotOurs
	}
	var unverified Claims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &unverified); err != nil || unverified.Issuer != v.issuer {
		return nil, ErrNotOurs
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	keys := make([]jwt.VerificationKey, len(v.keys))
	for i, k := range v.keys {
		keys[i] = k
	}
	claims := &Claims{}
	_, err := jwt.ParseWithClaims(token, claims,
		func(*jwt.Token) (any, error) { return jwt.VerificationKeySet{Keys: keys}, nil },
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}),
		jwt.WithIssuer(v.issuer), jwt.WithAudience(v.audiences...), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(now), jwt.WithLeeway(leeway))
	if err != nil {
		return nil, err
	}
	k := claims.Kubernetes
	if k.Namespace == "" || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" {
		return nil, errors.New("token lacks the kubernetes.io namespace or service account claims")
	}
	if claims.Subject != "" && claims.Subject != Subject(k.Namespace, k.ServiceAccount.Name) {
		return nil, fmt.Errorf("token subject %q does not name its service account", claims.Subject)
	}
	return claims, nil
}

// leeway is the clock skew Verify tolerates on exp and nbf, kube's NotBefore/expiry
// leeway (jwt.DefaultLeeway, one minute).
const leeway = time.Minute

// KeyID is how kube-apiserver names a public key in the tokens' kid header: the
// unpadded base64url SHA-256 of its PKIX DER form.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

func signingMethod(pub crypto.PublicKey) (jwt.SigningMethod, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return jwt.SigningMethodRS256, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jwt.SigningMethodES256, nil
		case elliptic.P384():
			return jwt.SigningMethodES384, nil
		case elliptic.P521():
			return jwt.SigningMethodES512, nil
		}
	}
	return nil, fmt.Errorf("serviceaccount: cannot sign tokens with a %T key", pub)
}
