// Package authentication finds out who sends a request: a client certificate the TLS
// handshake verified against the cluster CA (user = CN, groups = O), or a bootstrap token
// in `Authorization: Bearer <id>.<secret>` (user system:bootstrap:<id>, group
// system:bootstrappers). Mirrors k8s.io/apiserver/pkg/authentication/request/x509 and
// k8s.io/kubernetes/plugin/pkg/auth/authenticator/token/bootstrap.
package authentication

import (
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"skiff.dev/services/internal/pki"
)

// Names the authenticators give (kube's k8s.io/apiserver/pkg/authentication/user and
// k8s.io/cluster-bootstrap/token/api).
const (
	BootstrapUserPrefix  = "system:bootstrap:"
	BootstrapGroup       = "system:bootstrappers"
	AnonymousUser        = user.Anonymous
	UnauthenticatedGroup = user.AllUnauthenticated
	AuthenticatedGroup   = user.AllAuthenticated
)

// ErrInvalidToken is a bearer token that is malformed, unknown, wrong or expired.
var ErrInvalidToken = errors.New("invalid bearer token")

// Authenticator finds the user of a request: ok is false when the request carries no
// credential; err is set when it carries one that does not prove who it claims (the
// request gets 401 either way unless anonymous access is allowed).
type Authenticator interface {
	AuthenticateRequest(r *http.Request) (info user.Info, ok bool, err error)
}

// Union tries each authenticator in order and returns the first that recognises the
// request; an error from one is returned only when no other succeeds.
type Union []Authenticator

// AuthenticateRequest implements Authenticator.
func (u Union) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	var errs []error
	for _, a := range u {
		info, ok, err := a.AuthenticateRequest(r)
		if ok {
			return info, true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return nil, false, errors.Join(errs...)
}

// X509 authenticates a request by the client certificate the TLS handshake verified
// (tls.Config.ClientCAs = the cluster CA, ClientAuth = VerifyClientCertIfGiven): the user
// is the leaf's CommonName, its groups the Organizations, plus system:authenticated.
type X509 struct{}

// AuthenticateRequest implements Authenticator.
func (X509) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil, false, nil
	}
	return CertificateUser(r.TLS.VerifiedChains[0][0])
}

// CertificateUser is the user a verified client certificate names. A certificate without
// a CommonName proves nobody and is an error.
func CertificateUser(cert *x509.Certificate) (user.Info, bool, error) {
	if cert.Subject.CommonName == "" {
		return nil, false, errors.New("client certificate has no common name")
	}
	groups := append(slices.Clone(cert.Subject.Organization), AuthenticatedGroup)
	return &user.DefaultInfo{Name: cert.Subject.CommonName, Groups: groups}, true, nil
}

// BootstrapTokens authenticates `Authorization: Bearer <id>.<secret>` against the tokens
// in a bootstrap token file (pki.BootstrapTokenFile), re-reading the file when it
// changes so tokens can be added or revoked without a restart: a token removed from the
// file, or the whole file deleted, stops authenticating at the next request. Nothing of
// an earlier read outlives the file: a file that cannot be read or does not parse
// authenticates no token until it is fixed (skiff writes it atomically, so a reader never
// sees half of it; a hand edit that is momentarily broken costs bootstrapping kubelets a
// retry, where keeping the last good file would keep a token an admin just removed).
type BootstrapTokens struct {
	// Path is the bootstrap token file.
	Path string
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	file    os.FileInfo                   // the file last read, to notice a replaced or rewritten one
	tokens  map[string]pki.BootstrapToken // by ID
	readErr error
}

// AuthenticateRequest implements Authenticator. A bearer token that is not a bootstrap
// token, is unknown, has the wrong secret or has expired is ErrInvalidToken.
func (b *BootstrapTokens) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return nil, false, nil
	}
	token = strings.TrimSpace(token)
	id, secret, ok := pki.ParseBootstrapToken(token)
	if !ok {
		return nil, false, ErrInvalidToken
	}
	tokens, err := b.load()
	if err != nil {
		return nil, false, err
	}
	tok, ok := tokens[id]
	if !ok || subtle.ConstantTimeCompare([]byte(tok.Secret), []byte(secret)) != 1 {
		return nil, false, ErrInvalidToken
	}
	now := time.Now
	if b.Now != nil {
		now = b.Now
	}
	if tok.Expired(now()) {
		return nil, false, ErrInvalidToken
	}
	return &user.DefaultInfo{Name: BootstrapUserPrefix + id, Groups: []string{BootstrapGroup, AuthenticatedGroup}}, true, nil
}

// load returns the tokens, re-reading the file when it was replaced (another inode, as
// an atomic rename leaves) or rewritten (size or mtime changed). A missing file holds no
// token; an unreadable or malformed one holds none either, and its error is returned.
func (b *BootstrapTokens) load() (map[string]pki.BootstrapToken, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := os.Stat(b.Path)
	if err != nil {
		b.tokens, b.file, b.readErr = nil, nil, nil
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if b.file != nil && os.SameFile(st, b.file) && st.ModTime().Equal(b.file.ModTime()) && st.Size() == b.file.Size() {
		return b.tokens, b.readErr
	}
	list, err := pki.ReadBootstrapTokens(b.Path)
	var tokens map[string]pki.BootstrapToken
	if err == nil {
		tokens = make(map[string]pki.BootstrapToken, len(list))
		for _, t := range list {
			tokens[t.ID] = t
		}
	}
	b.tokens, b.file, b.readErr = tokens, st, err
	return tokens, err
}
