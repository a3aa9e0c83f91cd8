// Package apiservertest starts a real skiff apiserver over a real embedded etcd for tests
// of the apiserver's clients (scheduler, kubelet, end-to-end suites). Nothing is faked:
// requests go over loopback HTTP and land in etcd.
package apiservertest

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/embedetcd"
	"skiff.dev/services/internal/pki"
)

// Server is a running test apiserver.
type Server struct {
	// Config reaches the apiserver at its loopback URL as the admin (system:masters).
	Config *rest.Config
	// URL is the apiserver's base URL, e.g. "https://127.0.0.1:41234".
	URL string
	// Etcd is the embedded etcd beneath it.
	Etcd *embedetcd.Etcd
	// PKIDir is the `skiff pki init` directory the apiserver serves with (CA, serving
	// certificate, bootstrap tokens, kubeconfigs pointing at URL).
	PKIDir string
	// CA is the cluster CA; ClientConfig issues client certificates from it.
	CA *pki.CA
	// BootstrapToken is a valid bootstrap token from PKIDir's token file.
	BootstrapToken pki.BootstrapToken

	t         testing.TB
	addr      string
	client    *clientv3.Client
	configure []func(*apiserver.Config)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs etcd (data in t.TempDir()) and an apiserver on 127.0.0.1 with a free port,
// waits until the system namespaces exist, and stops both when the test ends. It fails
// the test if either cannot start.
func Start(t testing.TB) *rest.Config {
	return StartServer(t).Config
}

// StartServer is Start, returning the whole Server. Each configure function may change
// the apiserver's Config (e.g. set NATSURL) before every start, restarts included.
func StartServer(t testing.TB, configure ...func(*apiserver.Config)) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	pkiDir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: pkiDir, APIServerURL: "https://" + l.Addr().String()}); err != nil {
		t.Fatalf("pki init: %v", err)
	}
	// etcd requires mutual TLS, as in the all-in-one and compose.
	etcd, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: t.TempDir(), ClientURL: "https://127.0.0.1:0", PKIDir: pkiDir})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	client, err := etcd.Client()
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := &Server{t: t, Etcd: etcd, client: client, addr: l.Addr().String(), configure: configure}
	s.URL = "https://" + s.addr
	s.PKIDir = pkiDir
	if s.CA, err = pki.LoadCA(s.PKIDir); err != nil {
		t.Fatalf("load CA: %v", err)
	}
	tokens, err := pki.ReadBootstrapTokens(filepath.Join(s.PKIDir, pki.BootstrapTokenFile))
	if err != nil || len(tokens) == 0 {
		t.Fatalf("bootstrap tokens: %v", err)
	}
	s.BootstrapToken = tokens[0]
	s.Config = s.ClientConfig(pki.Admin.CommonName, pki.Admin.Organizations...)
	t.Cleanup(s.StopAPIServer)
	s.serve(l)
	return s
}

// serve runs an apiserver on l until StopAPIServer and waits for the system namespaces.
func (s *Server) serve(l net.Listener) {
	s.t.Helper()
	cfg, err := apiserver.ConfigFromPKI(s.PKIDir, s.client)
	if err != nil {
		s.t.Fatalf("apiserver config: %v", err)
	}
	for _, f := range s.configure {
		f(&cfg)
	}
	api, err := apiserver.New(cfg)
	if err != nil {
		s.t.Fatalf("apiserver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := api.Serve(ctx, l); err != nil {
			s.t.Errorf("apiserver serve: %v", err)
		}
	}()
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
	if err := api.EnsureSystemNamespaces(ctx); err != nil {
		s.t.Fatalf("system namespaces: %v", err)
	}
	if err := api.WaitForBootstrapPolicy(ctx); err != nil {
		s.t.Fatalf("RBAC bootstrap policy: %v", err)
	}
}

// StopAPIServer stops the apiserver (etcd keeps running), closing every open watch, as a
// crash or a rolling restart does. It is a no-op when it is already stopped.
func (s *Server) StopAPIServer() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// RestartAPIServer stops the apiserver and starts a new one on the same address over the
// same etcd, so clients reconnect to the URL they know.
func (s *Server) RestartAPIServer() {
	s.t.Helper()
	s.StopAPIServer()
	var l net.Listener
	var err error
	// The old listener's port is free again once Serve returned; retry briefly in case
	// the kernel has not released it yet.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.serve(l)
}

// ClientConfig is a rest.Config that reaches the apiserver as user in groups, with a
// fresh client certificate from the test CA (CN user, O groups), as `skiff pki init` and
// the csr-signer issue them.
func (s *Server) ClientConfig(user string, groups ...string) *rest.Config {
	s.t.Helper()
	kp, err := s.CA.IssueClient(user, groups, time.Hour)
	if err != nil {
		s.t.Fatalf("issue client certificate for %s: %v", user, err)
	}
	return &rest.Config{
		Host: s.URL, QPS: 1000, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA.CertPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM},
	}
}

// TokenConfig is a rest.Config that reaches the apiserver with a bearer token and no
// client certificate, as a kubelet's bootstrap kubeconfig does.
func (s *Server) TokenConfig(token string) *rest.Config {
	return &rest.Config{Host: s.URL, QPS: 1000, Burst: 1000, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA.CertPEM}}
}

// AnonymousConfig trusts the apiserver but presents no credential at all.
func (s *Server) AnonymousConfig() *rest.Config {
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAData: s.CA.CertPEM}}
}

// HTTPClient is an *http.Client that talks to the apiserver as the admin, for tests that
// send raw requests.
func (s *Server) HTTPClient() *http.Client {
	s.t.Helper()
	c, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		s.t.Fatalf("http client: %v", err)
	}
	return c
}

// SetBootstrapTokens replaces the apiserver's bootstrap token file with tokens, each
// "<id>.<secret>" with its expiration (zero: never); the apiserver re-reads the file on
// its next token request. Server.BootstrapToken stays valid only if it is among them.
func (s *Server) SetBootstrapTokens(tokens map[string]time.Time) {
	s.t.Helper()
	var list []pki.BootstrapToken
	for token, exp := range tokens {
		id, secret, ok := pki.ParseBootstrapToken(token)
		if !ok {
			s.t.Fatalf("bootstrap token %q: want <id>.<secret>", token)
		}
		list = append(list, pki.BootstrapToken{ID: id, Secret: secret, Expiration: exp})
	}
	path := filepath.Join(s.PKIDir, pki.BootstrapTokenFile)
	if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens(list), 0o600); err != nil {
		s.t.Fatalf("write bootstrap tokens: %v", err)
	}
}
