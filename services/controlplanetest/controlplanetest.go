// Package controlplanetest starts a small real control plane for tests of the apiserver
// and its clients (scheduler, kubelet, controllers, end-to-end suites): a skiff apiserver
// over a real embedded etcd and, unless asked not to, the controller-manager controllers
// every cluster relies on (see StartServer). Nothing is faked: requests go over loopback
// HTTP and land in etcd. It is for tests only; no production package imports it. It lives
// outside the apiserver because it links the controller-manager, as kube's
// test/integration/framework does.
package controlplanetest

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controllermanager/clusterroleaggregation"
	"skiff.dev/services/controllermanager/namespace"
	"skiff.dev/services/controllermanager/rootcacertpublisher"
	"skiff.dev/services/controllermanager/serviceaccount"
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
	// EtcdCA is the etcd CA (pki.EtcdCA) of PKIDir: etcd trusts its certificates only.
	EtcdCA *pki.CA
	// BootstrapToken is a valid bootstrap token from PKIDir's token file.
	BootstrapToken pki.BootstrapToken

	t         testing.TB
	addr      string
	client    *clientv3.Client
	etcdCfg   embedetcd.Config
	etcdDown  bool // StopEtcd closed Etcd
	configure []func(*apiserver.Config)

	mu     sync.Mutex
	api    *apiserver.APIServer
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs etcd (data in t.TempDir()) and an apiserver on 127.0.0.1 with a free port,
// waits until the system namespaces exist, runs the controllers every cluster relies on
// (see StartServer), and stops all when the test ends. It fails the test if any cannot
// start.
func Start(t testing.TB) *rest.Config {
	return StartServer(t).Config
}

// StartServer is Start, returning the whole Server. Each configure function may change
// the apiserver's Config (e.g. set NATSURL) before every start, restarts included.
//
// Beside the apiserver it runs, as system:kube-controller-manager, the
// controller-manager's namespace, serviceaccount, root-ca-cert-publisher and
// clusterrole-aggregation controllers (not the node or workload ones), so namespaces are
// emptied and removed, each has its default ServiceAccount and kube-root-ca.crt, and
// admin/edit/view hold their aggregated rules before StartServer returns, as in a
// cluster. StartServerWithoutControllers runs the apiserver alone.
func StartServer(t testing.TB, configure ...func(*apiserver.Config)) *Server {
	t.Helper()
	s := StartServerWithoutControllers(t, configure...)
	s.startControllers()
	return s
}

// StartServerWithoutControllers is StartServer without any controller: a cluster with
// no controller-manager, where a deleted namespace stays Terminating and a namespace has
// no default ServiceAccount (so pods are refused by ServiceAccount admission).
func StartServerWithoutControllers(t testing.TB, configure ...func(*apiserver.Config)) *Server {
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
	etcdCfg := embedetcd.Config{Dir: t.TempDir(), ClientURL: "https://127.0.0.1:0", PKIDir: pkiDir}
	etcd, err := embedetcd.Start(context.Background(), etcdCfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	etcdCfg.ClientURL = etcd.Endpoint() // a restart comes back where the apiserver dials
	client, err := etcd.Client()
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := &Server{t: t, Etcd: etcd, etcdCfg: etcdCfg, client: client, addr: l.Addr().String(), configure: configure}
	t.Cleanup(s.StopEtcd)
	s.URL = "https://" + s.addr
	s.PKIDir = pkiDir
	if s.CA, err = pki.LoadCA(s.PKIDir); err != nil {
		t.Fatalf("load CA: %v", err)
	}
	if s.EtcdCA, err = pki.LoadAuthority(s.PKIDir, pki.EtcdCA); err != nil {
		t.Fatalf("load etcd CA: %v", err)
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
	s.api, s.cancel, s.done = api, cancel, done
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

// startControllers runs the namespace controllers and clusterrole-aggregation until the
// test ends and waits until the aggregated ClusterRoles are filled.
func (s *Server) startControllers() {
	s.t.Helper()
	config := s.ClientConfig(pki.ControllerManager.CommonName, pki.ControllerManager.Organizations...)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		s.t.Fatalf("controller client: %v", err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		s.t.Fatalf("controller dynamic client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	f := factory.Core().V1()
	ns := namespace.New(f.Namespaces(), client, client.Discovery(), dyn)
	sa := serviceaccount.New(f.Namespaces(), f.ServiceAccounts(), client, nil)
	ca := rootcacertpublisher.New(f.Namespaces(), f.ConfigMaps(), client, s.CA.CertPEM)
	roles := factory.Rbac().V1().ClusterRoles()
	aggregation := clusterroleaggregation.New(roles, client)
	var wg sync.WaitGroup
	for _, run := range []func(){
		func() { ns.Run(ctx, 2) }, func() { sa.Run(ctx, 1) }, func() { ca.Run(ctx, 1) }, func() { aggregation.Run(ctx, 1) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	factory.Start(ctx.Done())
	s.t.Cleanup(func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	})
	// Wait until every aggregated ClusterRole holds what it aggregates, as a cluster's
	// controller-manager would have made it by the time a user binds to admin/edit/view.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		all := make([]*rbacv1.ClusterRole, len(list.Items))
		for i := range list.Items {
			all[i] = &list.Items[i]
		}
		for _, r := range all {
			if r.AggregationRule != nil && !equality.Semantic.DeepEqual(clusterroleaggregation.Aggregate(r, all), r.Rules) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatalf("aggregated ClusterRoles not filled: %v", err)
	}
}

// StopEtcd stops the embedded etcd while the apiserver keeps running, as a crash of etcd
// does: the apiserver's requests wait for it (up to their timeout) and /readyz fails.
// It is a no-op when etcd is already stopped.
func (s *Server) StopEtcd() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.etcdDown {
		s.Etcd.Close()
		s.etcdDown = true
	}
}

// StartEtcd starts etcd again on the same data directory and client URL after StopEtcd;
// the apiserver's etcd client reconnects to it by itself.
func (s *Server) StartEtcd() {
	s.t.Helper()
	var etcd *embedetcd.Etcd
	// The old server's ports are free once Close returned; retry briefly in case the
	// kernel has not released them yet.
	var startErr error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		etcd, startErr = embedetcd.Start(ctx, s.etcdCfg)
		return startErr == nil, nil
	})
	if err != nil {
		s.t.Fatalf("start etcd again: %v (last: %v)", err, startErr)
	}
	s.mu.Lock()
	s.Etcd, s.etcdDown = etcd, false
	s.mu.Unlock()
}

// Peer is one more apiserver over a Server's etcd, on a loopback address of its own at
// the Server's port and with an etcd client of its own, as a further kube-apiserver of
// a highly available control plane: it shares the Server's PKI, so the Server's CA and
// client certificates reach it.
type Peer struct {
	// Config reaches the peer at its URL as the admin (system:masters).
	Config *rest.Config
	// URL is the peer's base URL, e.g. "https://127.0.0.2:41234".
	URL string
	// Etcd is the peer's own etcd client, closed when the test ends. Closing it earlier
	// cuts the peer off etcd as a crash does: a Stop after it cannot delete anything.
	Etcd *clientv3.Client

	cancel context.CancelFunc
	done   chan struct{}
}

// StartPeer runs a further apiserver over the Server's etcd on ip, a loopback address
// other than 127.0.0.1 (Linux routes all of 127.0.0.0/8 to lo), at the Server's port,
// as the apiservers of one cluster share their port. It is configured by configure only
// (not by the Server's own configure functions). StartPeer waits until the peer has the
// system namespaces and the RBAC bootstrap policy, and stops it when the test ends. It
// fails the test if it cannot start.
func (s *Server) StartPeer(ip string, configure ...func(*apiserver.Config)) *Peer {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
	if err != nil {
		s.t.Fatalf("listen: %v", err)
	}
	client, err := s.Etcd.Client()
	if err != nil {
		s.t.Fatalf("etcd client: %v", err)
	}
	s.t.Cleanup(func() { _ = client.Close() })
	cfg, err := apiserver.ConfigFromPKI(s.PKIDir, client)
	if err != nil {
		s.t.Fatalf("apiserver config: %v", err)
	}
	for _, f := range configure {
		f(&cfg)
	}
	api, err := apiserver.New(cfg)
	if err != nil {
		s.t.Fatalf("apiserver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Peer{URL: "https://" + l.Addr().String(), Etcd: client, cancel: cancel, done: make(chan struct{})}
	p.Config = s.ClientConfig(pki.Admin.CommonName, pki.Admin.Organizations...)
	// The serving certificate names 127.0.0.1, not the peer's own loopback address.
	p.Config.Host, p.Config.TLSClientConfig.ServerName = p.URL, "localhost"
	go func() {
		defer close(p.done)
		if err := api.Serve(ctx, l); err != nil {
			s.t.Errorf("peer apiserver serve: %v", err)
		}
	}()
	s.t.Cleanup(p.Stop)
	if err := api.EnsureSystemNamespaces(ctx); err != nil {
		s.t.Fatalf("peer system namespaces: %v", err)
	}
	if err := api.WaitForBootstrapPolicy(ctx); err != nil {
		s.t.Fatalf("peer RBAC bootstrap policy: %v", err)
	}
	return p
}

// Stop shuts the peer down gracefully and waits until it has; a no-op once stopped.
func (p *Peer) Stop() {
	p.cancel()
	<-p.done
}
