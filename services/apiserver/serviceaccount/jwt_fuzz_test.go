package serviceaccount

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"
)

// fuzzKeyPEM is a P-256 key made for this fuzz target only, fixed so that every fuzz
// worker process verifies the seed token with the same key.
const fuzzKeyPEM = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQa1r+Oiz2lHyIOZH
NiRGjHdCb2rUbLweBvMVpqDcXauhRANCAASS6F5tOpqxNDXqZvY6B74wrxTHMoLM
OBt0nEMhqQIW5jzvAjUuX2od9C/REKyo+dJaqo3SwZtODHosJAltBBAs
-----END PRIVATE KEY-----
`

// FuzzVerify feeds arbitrary bearer tokens to the service-account token verifier, seeded
// with a valid token. Properties: no panic; a token that is not a JWT of this issuer is
// ErrNotOurs; and a token that verifies carries exactly the payload skiff signed (no
// mutation of header, payload or signature forges a token), with the claims every
// accepted token must have.
func FuzzVerify(f *testing.F) {
	block, _ := pem.Decode([]byte(fuzzKeyPEM))
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		f.Fatal(err)
	}
	key := parsed.(crypto.Signer)
	signer, err := NewSigner(DefaultIssuer, key)
	if err != nil {
		f.Fatal(err)
	}
	claims := NewClaims(testSA, Binding{Pod: testPod}, []string{"api"}, t0, time.Hour)
	claims.ID = "fuzz" // a fixed jti: the signed payload is the same in every process
	token, err := signer.Sign(claims)
	if err != nil {
		f.Fatal(err)
	}
	signedPayload := segment(f, token, 1)
	f.Add(token)
	f.Add(strings.Replace(token, ".", "..", 1))
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMuY2x1c3Rlci5sb2NhbCJ9.")
	f.Add("abcdef.0123456789abcdef")
	v := NewVerifier(DefaultIssuer, []string{"api"}, []crypto.PublicKey{key.Public()})
	v.Now = func() time.Time { return t0.Add(time.Minute) }
	f.Fuzz(func(t *testing.T, token string) {
		got, err := v.Verify(token)
		if err != nil {
			if strings.Count(token, ".") != 2 && !errors.Is(err, ErrNotOurs) {
				t.Fatalf("%q is no JWT, but the error is not ErrNotOurs: %v", token, err)
			}
			return
		}
		if payload := segment(t, token, 1); !bytes.Equal(payload, signedPayload) {
			t.Fatalf("forged token accepted: payload %s, signed %s", payload, signedPayload)
		}
		if got.Issuer != DefaultIssuer || got.Kubernetes.ServiceAccount.UID == "" || got.ExpiresAt == nil {
			t.Fatalf("accepted claims lack issuer, service account or expiry: %+v", got)
		}
	})
}

// segment is the decoded i-th dot-separated part of a compact JWT.
func segment(t testing.TB, token string, i int) []byte {
	t.Helper()
	parts := strings.Split(token, ".")
	data, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		// jwt accepts padded segments too.
		if data, err = base64.URLEncoding.DecodeString(parts[i]); err != nil {
			t.Fatalf("segment %d of an accepted token does not decode: %v", i, err)
		}
	}
	return data
}
