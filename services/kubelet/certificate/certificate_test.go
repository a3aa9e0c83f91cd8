package certificate_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	clientcertificate "k8s.io/client-go/util/certificate"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/certificate"
)

const nodeName = "n1"

func newClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startSigner runs a real csr-signer as system:skiff:csr-signer until the test ends.
func startSigner(t *testing.T, s *controlplanetest.Server, autoApprove bool) {
	t.Helper()
	startSignerWith(t, s, csrsigner.Config{AutoApprove: autoApprove})
}

// noHosts resolves no name: the control-plane names do not exist on this host.
type noHosts struct{}

func (noHosts) LookupHost(_ context.Context, host string) ([]string, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// approveServing is a csr-signer that also approves kubelet serving requests.
var approveServing = csrsigner.Config{AutoApprove: true, ApproveKubeletServing: true, Resolver: noHosts{}}

// startSignerWith is startSigner with cfg's approval settings.
func startSignerWith(t *testing.T, s *controlplanetest.Server, cfg csrsigner.Config) {
	t.Helper()
	cfg.Client, cfg.CA = newClient(t, s.ClientConfig(pki.CSRSigner.CommonName)), s.CA
	c, err := csrsigner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// paths is a kubelet's credential files in a fresh directory.
type paths struct{ kubeconfig, bootstrap, certDir string }

func newPaths(t *testing.T, s *controlplanetest.Server) paths {
	dir := t.TempDir()
	return paths{
		kubeconfig: filepath.Join(dir, "kubelet.kubeconfig"),
		bootstrap:  filepath.Join(s.PKIDir, pki.BootstrapKubeconfigFile),
		certDir:    filepath.Join(dir, "pki"),
	}
}

// whoami asks the apiserver who cfg authenticates as.
func whoami(t *testing.T, cfg *rest.Config) authenticationv1.UserInfo {
	t.Helper()
	review, err := newClient(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo
}

func loadKubeconfig(t *testing.T, path string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	return cfg
}

func listCSRs(t *testing.T, s *controlplanetest.Server) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := newClient(t, s.Config).CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestBootstrapTokenKubeletBecomesReadyNode(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	p := newPaths(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	cfg, m, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
		NodeName: nodeName, KubeconfigPath: p.kubeconfig, BootstrapKubeconfigPath: p.bootstrap, CertDir: p.certDir, RotateCertificates: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert := m.Current()
	if cert == nil || cert.Leaf.Subject.CommonName != "system:node:"+nodeName || !slices.Equal(cert.Leaf.Subject.Organization, []string{"system:nodes"}) {
		t.Fatalf("client certificate %+v, want CN system:node:%s O system:nodes", cert, nodeName)
	}
	if u := whoami(t, cfg); u.Username != "system:node:"+nodeName || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("kubelet authenticates as %+v", u)
	}
	// The written kubeconfig carries the same identity on its own.
	if u := whoami(t, loadKubeconfig(t, p.kubeconfig)); u.Username != "system:node:"+nodeName {
		t.Fatalf("written kubeconfig authenticates as %+v", u)
	}
	csrs := listCSRs(t, s)
	if len(csrs) != 1 || csrs[0].Spec.Username != "system:bootstrap:"+s.BootstrapToken.ID {
		t.Fatalf("CSRs %+v, want one from the bootstrap token", csrs)
	}

	rt := sim.New()
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	kl, err := kubelet.New(kubelet.Config{
		NodeName: nodeName, Client: newClient(t, cfg), RuntimeEndpoint: cri.Socket, RootDir: t.TempDir(), NodeIP: "10.1.2.3",
		Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}, PodCIDR: sim.PodCIDR,
	})
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- kl.Run(kctx) }()
	t.Cleanup(func() {
		kcancel()
		<-done
	})
	admin := newClient(t, s.Config)
	poll(t, "node Ready", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

func TestRestartReusesTheIssuedIdentity(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	p := newPaths(t, s)
	ctx := context.Background()
	if err := certificate.LoadClientCert(ctx, p.kubeconfig, p.bootstrap, p.certDir, nodeName, nil); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(p.certDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := certificate.LoadClientCert(ctx, p.kubeconfig, p.bootstrap, p.certDir, nodeName, nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(p.certDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("restart replaced a valid certificate")
	}
	if n := len(listCSRs(t, s)); n != 1 {
		t.Errorf("%d CSRs after a restart, want 1", n)
	}
}

func TestWithoutAutoApprovalTheKubeletWaitsForAPerson(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, false)
	p := newPaths(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- certificate.LoadClientCert(ctx, p.kubeconfig, p.bootstrap, p.certDir, nodeName, nil) }()

	var csrs []certificatesv1.CertificateSigningRequest
	poll(t, "the kubelet's CSR", func() bool { csrs = listCSRs(t, s); return len(csrs) == 1 })
	select {
	case err := <-done:
		t.Fatalf("bootstrap returned before approval: %v", err)
	default:
	}
	if _, err := os.Stat(p.kubeconfig); !os.IsNotExist(err) {
		t.Fatalf("kubeconfig written before approval: %v", err)
	}

	// kubectl certificate approve, as the admin.
	csr := csrs[0]
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve.",
	})
	if _, err := newClient(t, s.Config).CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, &csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("bootstrap did not finish after approval")
	}
	if u := whoami(t, loadKubeconfig(t, p.kubeconfig)); u.Username != "system:node:"+nodeName {
		t.Fatalf("kubeconfig authenticates as %+v", u)
	}
}

// seedNearlyExpiredCertificate stores a client certificate for the node, issued by the
// cluster CA 9 minutes ago for 10 minutes (90 % of its life gone), and a kubeconfig
// using it, as a kubelet restarted late in its certificate's life finds them.
func seedNearlyExpiredCertificate(t *testing.T, s *controlplanetest.Server, p paths) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert, certPEM, err := s.CA.Sign(&x509.Certificate{
		Subject:   pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		NotBefore: now.Add(-9 * time.Minute), NotAfter: now.Add(time.Minute),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := clientcertificate.NewFileStore(certificate.ClientPairName, p.certDir, p.certDir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	kubeconfig := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: s.URL, CertificateAuthorityData: s.CA.CertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()}},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "x",
	}
	if err := clientcmd.WriteToFile(kubeconfig, p.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestClientCertificateIsRotatedLateInItsLife(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	p := newPaths(t, s)
	old := seedNearlyExpiredCertificate(t, s, p)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	cfg, m, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
		NodeName: nodeName, KubeconfigPath: p.kubeconfig, BootstrapKubeconfigPath: p.bootstrap, CertDir: p.certDir, RotateCertificates: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "a rotated certificate", func() bool {
		c := m.Current()
		return c != nil && c.Leaf.SerialNumber.Cmp(old.SerialNumber) != 0
	})
	renewed := m.Current().Leaf
	if renewed.Subject.CommonName != "system:node:"+nodeName || !renewed.NotAfter.After(old.NotAfter) {
		t.Fatalf("renewed certificate %v valid until %v", renewed.Subject, renewed.NotAfter)
	}
	csrs := listCSRs(t, s)
	if len(csrs) != 1 || csrs[0].Spec.Username != "system:node:"+nodeName {
		t.Fatalf("CSRs %+v, want one renewal asked by the node itself", csrs)
	}
	if u := whoami(t, cfg); u.Username != "system:node:"+nodeName {
		t.Fatalf("after rotation the kubelet authenticates as %+v", u)
	}
	// The kubeconfig points at the store's current pair, so it follows the rotation.
	onDisk, err := certutil.CertsFromFile(filepath.Join(p.certDir, "kubelet-client-current.pem"))
	if err != nil || onDisk[0].SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("current pair on disk is not the renewed certificate: %v", err)
	}
}

func TestServingCertificateForTheNodesAddresses(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSignerWith(t, s, approveServing)
	ctx := context.Background()
	node := newClient(t, s.ClientConfig("system:node:"+nodeName, "system:nodes"))
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: nodeName}}
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Status: corev1.NodeStatus{Addresses: addresses}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := certificate.NewServingCertificateManager(node, nodeName, t.TempDir(), func() []corev1.NodeAddress { return addresses })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetCertificate(nil); err == nil {
		t.Fatal("a serving certificate before any was issued")
	}
	m.Start()
	t.Cleanup(m.Stop)
	poll(t, "a serving certificate", func() bool { return m.Current() != nil })

	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: m.ServingCertificate()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		conn, err := l.Accept()
		if err == nil {
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	for _, serverName := range []string{nodeName, "10.0.0.5"} {
		t.Run("verified as "+serverName, func(t *testing.T) {
			leaf := m.Current().Leaf
			opts := x509.VerifyOptions{Roots: s.CA.CertPool(), DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if net.ParseIP(serverName) != nil {
				opts.DNSName = ""
				if err := leaf.VerifyHostname(serverName); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := leaf.Verify(opts); err != nil {
				t.Fatal(err)
			}
		})
	}
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: s.CA.CertPool(), ServerName: nodeName})
	if err != nil {
		t.Fatalf("TLS handshake with the kubelet's serving certificate: %v", err)
	}
	_ = conn.Close()
}

// serveTLS accepts TLS connections with cfg on a loopback port until the test ends and
// returns a dial that reports the handshake's outcome.
func serveTLS(t *testing.T, cfg *tls.Config, roots *x509.CertPool) func() error {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	return func() error {
		conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, ServerName: nodeName})
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
}

// TestServingCertificateWaitsForAPerson: with csr-signer's defaults the kubelet's serving
// request waits for a person, as kube-controller-manager leaves it. Meanwhile StartServing
// has returned and the kubelet API refuses every TLS handshake; once a person approves
// the request, the API serves the issued certificate without a restart.
func TestServingCertificateWaitsForAPerson(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	node := newClient(t, s.ClientConfig("system:node:"+nodeName, "system:nodes"))
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: nodeName}}
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Status: corev1.NodeStatus{Addresses: addresses}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := certificate.StartServing(ctx, node, nodeName, t.TempDir(), addresses, s.CA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	dial := serveTLS(t, tlsConfig, s.CA.CertPool())
	var pending certificatesv1.CertificateSigningRequest
	poll(t, "the kubelet's serving CSR", func() bool {
		for _, csr := range listCSRs(t, s) {
			if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
				pending = csr
				return true
			}
		}
		return false
	})
	// csr-signer decides within milliseconds of a request: a second later it has, and
	// the request is still pending and the API without a certificate.
	time.Sleep(time.Second)
	admin := newClient(t, s.Config)
	got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, pending.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) > 0 || len(got.Status.Certificate) > 0 {
		t.Fatalf("serving CSR status %+v, want pending", got.Status)
	}
	if err := dial(); err == nil {
		t.Fatal("TLS handshake succeeded before the serving certificate was approved")
	}

	got.Status.Conditions = append(got.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve.",
	})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, got.Name, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "a TLS handshake with the approved certificate", func() bool { return dial() == nil })
}

// TestWriteIssuedServingCert: a serving certificate issued by the CA holder is served at
// once, with no request and no csr-signer; it is kept while it names the node's
// addresses, and issued again when they change.
func TestWriteIssuedServingCert(t *testing.T) {
	s := controlplanetest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	certDir := t.TempDir()
	sign := func(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
		_, certPEM, err := s.CA.Sign(tmpl, pub)
		return certPEM, err
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: nodeName}}
	current := func() *x509.Certificate {
		certs, err := certutil.CertsFromFile(filepath.Join(certDir, certificate.ServerPairName+"-current.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return certs[0]
	}
	for _, step := range []struct {
		name      string
		addresses []corev1.NodeAddress
		written   bool
	}{
		{"a store without a certificate gets one", addresses, true},
		{"a certificate for the same addresses is kept", addresses, false},
		{"a changed address gets a new certificate", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.2"}, {Type: corev1.NodeHostName, Address: nodeName}}, true},
	} {
		written, err := certificate.WriteIssuedServingCert(certDir, nodeName, step.addresses, sign)
		if err != nil || written != step.written {
			t.Fatalf("%s: written %v, %v; want %v", step.name, written, err, step.written)
		}
		if err := current().VerifyHostname(step.addresses[0].Address); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	if cert := current(); cert.Subject.CommonName != "system:node:"+nodeName || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Fatalf("certificate subject %v, usages %v", cert.Subject, cert.ExtKeyUsage)
	}

	node := newClient(t, s.ClientConfig("system:node:"+nodeName, "system:nodes"))
	addresses[0].Address = "127.0.0.2"
	tlsConfig, err := certificate.StartServing(ctx, node, nodeName, certDir, addresses, s.CA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := serveTLS(t, tlsConfig, s.CA.CertPool())(); err != nil {
		t.Fatalf("TLS handshake with the issued certificate: %v", err)
	}
	if csrs := listCSRs(t, s); len(csrs) != 0 {
		t.Fatalf("%d CSRs, want none: the issued certificate is served as is", len(csrs))
	}
}

// TestManagersStopWithTheirContext runs the TLS bootstrap with client rotation and a
// serving certificate, cancels their context, and checks that none of this package's
// goroutines (the rotation check of UpdateTransport) outlives it. client-go's Manager is
// left out: after Stop, its run loop stays parked in the wait for the next rotation
// deadline (certificate_manager.go selects on that timer and templateChanged only) until
// the deadline passes, which it does not observe the context for.
func TestManagersStopWithTheirContext(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	p := newPaths(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, m, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
		NodeName: nodeName, KubeconfigPath: p.kubeconfig, BootstrapKubeconfigPath: p.bootstrap, CertDir: p.certDir, RotateCertificates: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: nodeName}}
	if _, err := certificate.StartServing(ctx, newClient(t, cfg), nodeName, p.certDir, addresses, s.CA.CertPEM); err != nil {
		t.Fatal(err)
	}
	if m.Current() == nil {
		t.Fatal("no client certificate")
	}
	cancel()
	var leaked []string
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		leaked = certificateGoroutines()
		return len(leaked) == 0, nil
	})
	if len(leaked) > 0 {
		t.Fatalf("%d goroutines outlived their context:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// certificateGoroutines returns the stacks of goroutines running this package's code.
func certificateGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "TestManagersStopWithTheirContext") {
			continue
		}
		if strings.Contains(g, "skiff.dev/services/kubelet/certificate.") {
			found = append(found, g)
		}
	}
	return found
}

// logBuffer collects log output across goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestBootstrapRetriesUntilTheAPIServerAnswers(t *testing.T) {
	s := controlplanetest.StartServer(t)
	startSigner(t, s, true)
	p := newPaths(t, s)
	s.StopAPIServer()
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- certificate.LoadClientCert(ctx, p.kubeconfig, p.bootstrap, p.certDir, nodeName, slog.New(slog.NewTextHandler(logs, nil)))
	}()
	poll(t, "a failed attempt while the apiserver is down", func() bool { return strings.Contains(logs.String(), "will retry") })
	select {
	case err := <-done:
		t.Fatalf("bootstrap gave up while the apiserver was down: %v", err)
	default:
	}
	s.RestartAPIServer()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("bootstrap did not finish once the apiserver was back; logs:\n%s", logs)
	}
	if u := whoami(t, loadKubeconfig(t, p.kubeconfig)); u.Username != "system:node:"+nodeName {
		t.Fatalf("kubeconfig authenticates as %+v", u)
	}
}
