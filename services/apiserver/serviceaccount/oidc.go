package serviceaccount

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// Paths of OIDC discovery for service-account tokens, kube-apiserver's.
const (
	OpenIDConfigurationPath = "/.well-known/openid-configuration"
	JWKSPath                = "/openid/v1/jwks"
)

// DiscoveryDocuments are what OIDC discovery serves so that others can verify this
// issuer's tokens without asking the apiserver: the provider configuration and the
// public keys (a JWK set).
type DiscoveryDocuments struct {
	// OpenIDConfiguration is the JSON of /.well-known/openid-configuration.
	OpenIDConfiguration []byte
	// JWKS is the JSON of /openid/v1/jwks (application/jwk-set+json).
	JWKS []byte
}

// Discovery makes v's discovery documents, naming jwksURI (where the key set is
// served); "" means the issuer's URL with /openid/v1/jwks, reachable in-cluster when the
// issuer is the kubernetes Service's name. Errors: a key that is neither RSA nor ECDSA.
// Mirrors kube's pkg/serviceaccount/openidmetadata.go.
func (v *Verifier) Discovery(jwksURI string) (DiscoveryDocuments, error) {
	if jwksURI == "" {
		jwksURI = strings.TrimSuffix(v.issuer, "/") + JWKSPath
	}
	type jwk struct {
		Use string `json:"use"`
		Kty string `json:"kty"`
		Kid string `json:"kid"`
		Alg string `json:"alg"`
		Crv string `json:"crv,omitempty"`
		X   string `json:"x,omitempty"`
		Y   string `json:"y,omitempty"`
		N   string `json:"n,omitempty"`
		E   string `json:"e,omitempty"`
	}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	keys := []jwk{}
	var algs []string
	for _, pub := range v.keys {
		kid, err := KeyID(pub)
		if err != nil {
			return DiscoveryDocuments{}, err
		}
		method, err := signingMethod(pub)
		if err != nil {
			return DiscoveryDocuments{}, err
		}
		k := jwk{Use: "sig", Kid: kid, Alg: method.Alg()}
		switch p := pub.(type) {
		case *rsa.PublicKey:
			k.Kty, k.N, k.E = "RSA", b64(p.N.Bytes()), b64(big.NewInt(int64(p.E)).Bytes())
		case *ecdsa.PublicKey:
			size := (p.Curve.Params().BitSize + 7) / 8
			k.Kty, k.Crv = "EC", p.Curve.Params().Name
			k.X, k.Y = b64(p.X.FillBytes(make([]byte, size))), b64(p.Y.FillBytes(make([]byte, size)))
		default:
			return DiscoveryDocuments{}, fmt.Errorf("serviceaccount: no JWK for a %T key", pub)
		}
		keys = append(keys, k)
		if !slices.Contains(algs, k.Alg) {
			algs = append(algs, k.Alg)
		}
	}
	slices.Sort(algs)
	config, err := json.Marshal(map[string]any{
		"issuer":                                v.issuer,
		"jwks_uri":                              jwksURI,
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": algs,
	})
	if err != nil {
		return DiscoveryDocuments{}, err
	}
	set, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		return DiscoveryDocuments{}, err
	}
	return DiscoveryDocuments{OpenIDConfiguration: config, JWKS: set}, nil
}
