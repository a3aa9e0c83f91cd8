package authentication

import (
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"skiff.dev/services/internal/pki"
)

// FuzzBootstrapTokenHeader feeds arbitrary Authorization headers to the bootstrap token
// authenticator. Properties: no panic; a header without a bearer token is no credential
// (ok false, no error); a bearer token is ErrInvalidToken unless it is exactly the
// token in the file, which authenticates as system:bootstrap:<id>.
func FuzzBootstrapTokenHeader(f *testing.F) {
	const token = "abcdef.0123456789abcdef"
	path := filepath.Join(f.TempDir(), pki.BootstrapTokenFile)
	tok, _, _ := strings.Cut(token, ".")
	if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens([]pki.BootstrapToken{{ID: tok, Secret: token[7:]}}), 0o600); err != nil {
		f.Fatal(err)
	}
	a := &BootstrapTokens{Path: path}
	f.Add("Bearer " + token)
	f.Add("bearer  " + token + " ")
	f.Add("Bearer abcdef.0123456789abcdeg")
	f.Add("Basic YWRtaW46YWRtaW4=")
	f.Add("Bearer")
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("GET", "/api", nil)
		r.Header.Set("Authorization", header)
		info, ok, err := a.AuthenticateRequest(r)
		switch {
		case err != nil:
			if !errors.Is(err, ErrInvalidToken) || ok || info != nil {
				t.Fatalf("%q: %v, %v, %v", header, info, ok, err)
			}
		case ok:
			scheme, got, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
			if !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(got) != token || info.GetName() != BootstrapUserPrefix+tok {
				t.Fatalf("%q authenticated as %v", header, info)
			}
		case info != nil:
			t.Fatalf("%q: user %v without ok", header, info)
		}
	})
}
