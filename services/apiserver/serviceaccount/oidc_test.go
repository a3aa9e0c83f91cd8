package serviceaccount

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestDiscoveryVerifiesTokens checks that a token the signer makes verifies with the key
// the JWK set publishes under the token's kid, as an OIDC client (go-oidc, agnhost's
// test-service-account-issuer-discovery) checks it.
func TestDiscoveryVerifiesTokens(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey := newKey(t)
	signer, err := NewSigner(DefaultIssuer, rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(DefaultIssuer, []string{DefaultIssuer}, []crypto.PublicKey{rsaKey.Public(), ecKey.Public()})
	docs, err := v.Discovery("")
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := json.Unmarshal(docs.OpenIDConfiguration, &config); err != nil {
		t.Fatal(err)
	}
	if config.Issuer != DefaultIssuer || config.JWKSURI != DefaultIssuer+"/openid/v1/jwks" || len(config.Algs) != 2 || config.Algs[0] != "ES256" || config.Algs[1] != "RS256" {
		t.Fatalf("openid-configuration %s", docs.OpenIDConfiguration)
	}
	var set struct {
		Keys []struct{ Kty, Kid, Alg, Use, N, E, Crv, X, Y string }
	}
	if err := json.Unmarshal(docs.JWKS, &set); err != nil || len(set.Keys) != 2 {
		t.Fatalf("jwks %s: %v", docs.JWKS, err)
	}
	if k := set.Keys[1]; k.Kty != "EC" || k.Crv != "P-256" || len(k.X) != 43 || len(k.Y) != 43 {
		t.Errorf("EC key %+v", k)
	}

	token, err := signer.Sign(NewClaims(testSA, Binding{}, []string{DefaultIssuer}, time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.Parse(token, func(tok *jwt.Token) (any, error) {
		for _, k := range set.Keys {
			if k.Kid != tok.Header["kid"] || k.Kty != "RSA" || k.Use != "sig" || k.Alg != "RS256" {
				continue
			}
			n, _ := base64.RawURLEncoding.DecodeString(k.N)
			e, _ := base64.RawURLEncoding.DecodeString(k.E)
			return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
		}
		return nil, jwt.ErrTokenUnverifiable
	})
	if err != nil || !parsed.Valid {
		t.Fatalf("the token does not verify with the published key: %v", err)
	}
}
