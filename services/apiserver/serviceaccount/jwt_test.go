package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newKey(t *testing.T) crypto.Signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

var (
	testSA  = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "builder", UID: "sa-uid"}}
	testPod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "pod-uid"}}
	t0      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func TestSignedTokenCarriesKubernetesClaims(t *testing.T) {
	key := newKey(t)
	signer, err := NewSigner(DefaultIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	token, err := signer.Sign(NewClaims(testSA, Binding{Pod: testPod}, []string{"api"}, t0, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWT", token)
	}
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var h map[string]any
	var p map[string]any
	if err := json.Unmarshal(header, &h); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	kid, _ := KeyID(key.Public())
	if h["alg"] != "ES256" || h["kid"] != kid {
		t.Errorf("header %v; want alg ES256 and kid %s", h, kid)
	}
	want := map[string]any{
		"iss": DefaultIssuer, "sub": "system:serviceaccount:ns:builder", "aud": []any{"api"},
		"iat": float64(t0.Unix()), "nbf": float64(t0.Unix()), "exp": float64(t0.Add(time.Hour).Unix()),
		"kubernetes.io": map[string]any{
			"namespace":      "ns",
			"serviceaccount": map[string]any{"name": "builder", "uid": "sa-uid"},
			"pod":            map[string]any{"name": "web", "uid": "pod-uid"},
		},
	}
	for k, v := range want {
		got, _ := json.Marshal(p[k])
		wantJSON, _ := json.Marshal(v)
		if string(got) != string(wantJSON) {
			t.Errorf("claim %s = %s, want %s", k, got, wantJSON)
		}
	}
	if p["jti"] == "" || p["jti"] == nil {
		t.Error("token has no jti")
	}
}

func TestVerify(t *testing.T) {
	key, otherKey := newKey(t), newKey(t)
	signer, _ := NewSigner(DefaultIssuer, key)
	otherSigner, _ := NewSigner(DefaultIssuer, otherKey)
	foreign, _ := NewSigner("https://someone.else", key)
	sign := func(s *Signer, aud []string, issued time.Time, exp time.Duration) string {
		tok, err := s.Sign(NewClaims(testSA, Binding{}, aud, issued, exp))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, _ := NewSigner(DefaultIssuer, rsaKey)
	unsignedClaims := NewClaims(testSA, Binding{}, []string{"api"}, t0, time.Hour)
	unsignedClaims.Issuer = DefaultIssuer
	unsigned, _ := jwt.NewWithClaims(jwt.SigningMethodNone, unsignedClaims).SignedString(jwt.UnsafeAllowNoneSignatureType)

	verifier := NewVerifier(DefaultIssuer, []string{"api", "api2"}, []crypto.PublicKey{key.Public(), rsaKey.Public()})
	verifier.Now = func() time.Time { return t0.Add(10 * time.Minute) }
	for _, tc := range []struct {
		name    string
		token   string
		wantErr string // "" accepts
		notOurs bool
	}{
		{name: "a token this apiserver signed is accepted", token: sign(signer, []string{"api"}, t0, time.Hour)},
		{name: "any one of the accepted audiences will do", token: sign(signer, []string{"vault", "api2"}, t0, time.Hour)},
		{name: "an RSA key signs and verifies too (kubeadm's sa.key)", token: sign(rsaSigner, []string{"api"}, t0, time.Hour)},
		{name: "an expired token is refused", token: sign(signer, []string{"api"}, t0.Add(-2*time.Hour), time.Hour), wantErr: "expired"},
		{name: "a token from the future is refused", token: sign(signer, []string{"api"}, t0.Add(time.Hour), time.Hour), wantErr: "not valid yet"},
		{name: "a token for another audience is refused", token: sign(signer, []string{"vault"}, t0, time.Hour), wantErr: "aud"},
		{name: "a token signed with another key is refused", token: sign(otherSigner, []string{"api"}, t0, time.Hour), wantErr: "signature"},
		{name: "an unsigned token is refused", token: unsigned, wantErr: "signing method"},
		{name: "another issuer's token is not ours", token: sign(foreign, []string{"api"}, t0, time.Hour), notOurs: true},
		{name: "a bootstrap token is not ours", token: "abcdef.0123456789abcdef", notOurs: true},
		{name: "garbage with dots is not ours", token: "a.b.c", notOurs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims, err := verifier.Verify(tc.token)
			switch {
			case tc.notOurs:
				if !errors.Is(err, ErrNotOurs) {
					t.Fatalf("err %v, want ErrNotOurs", err)
				}
			case tc.wantErr == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if claims.Kubernetes.ServiceAccount.UID != "sa-uid" || claims.Kubernetes.Namespace != "ns" {
					t.Fatalf("claims %+v", claims.Kubernetes)
				}
			default:
				if err == nil || errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantErr)
				}
			}
		})
	}
}
