package pki_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
)

// TestClientTLSPresentsTheRotatedCertificate replaces a kubelet's
// kubelet-client-current.pem, as client-go's certificate manager does when it rotates,
// between two connections to a real NATS server: the second presents the new one.
func TestClientTLSPresentsTheRotatedCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string // client certificate CNs, one per handshake
	serverTLS.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		if len(cs.PeerCertificates) > 0 {
			seen = append(seen, cs.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)

	current := filepath.Join(t.TempDir(), "kubelet-client-current.pem")
	writePair := func(cn string) {
		kp, err := ca.IssueClient(cn, []string{"system:nodes"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteFileAtomic(current, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writePair("system:node:a")
	clientTLS, err := pki.ReloadingClientTLS(ca.CertPEM, current, "")
	if err != nil {
		t.Fatal(err)
	}
	connect := func() {
		nc, err := nats.Connect(ns.ClientURL(), nats.Secure(clientTLS))
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	connect()
	writePair("system:node:a-rotated")
	connect()

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "system:node:a" || seen[1] != "system:node:a-rotated" {
		t.Fatalf("client certificates presented: %q, want the first then the rotated one", seen)
	}
}

func TestClientTLSErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, key := pki.KeyPairFiles(dir, pki.Scheduler.Name)
	cases := []struct {
		name            string
		ca              []byte
		certFile, keyFn string
	}{
		{"CA without a certificate", []byte("not PEM"), cert, key},
		{"no certificate file", caPEM, "", ""},
		{"missing key pair", caPEM, filepath.Join(dir, "missing.crt"), key},
		{"key of another identity", caPEM, cert, filepath.Join(dir, pki.CSRSigner.Name+".key")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pki.ReloadingClientTLS(c.ca, c.certFile, c.keyFn); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if _, err := pki.ClientTLSFromFiles(dir, pki.Scheduler.Name, pki.ClusterCA, filepath.Join(dir, "missing-ca.crt"), cert, key); err == nil {
		t.Fatal("ClientTLSFromFiles: no error for a missing CA file")
	}
}

// TestClientTLSFromRESTConfigIsTheKubeconfigsIdentity connects to a real NATS server as
// the scheduler's kubeconfig; a kubeconfig with a bootstrap token instead of a client
// certificate has no identity NATS would take.
func TestClientTLSFromRESTConfigIsTheKubeconfigsIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen string
	serverTLS.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		if len(cs.PeerCertificates) > 0 {
			seen = cs.PeerCertificates[0].Subject.CommonName
		}
		return nil
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)

	restConfig, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, pki.Scheduler.Name+".kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := pki.ClientTLSFromRESTConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(clientTLS))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	mu.Lock()
	if seen != pki.Scheduler.CommonName {
		t.Errorf("NATS saw client %q, want %q", seen, pki.Scheduler.CommonName)
	}
	mu.Unlock()

	bootstrap, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, pki.BootstrapKubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.ClientTLSFromRESTConfig(bootstrap); err == nil {
		t.Error("a bootstrap-token kubeconfig gave a NATS identity")
	}
}

// TestClientTLSFromFilesFallsBackToTheDirectory dials a real NATS server with only the
// directory given, and with a CA file given: both present the named identity.
func TestClientTLSFromFilesFallsBackToTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	serverTLS.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		if len(cs.PeerCertificates) > 0 {
			seen = append(seen, cs.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	for _, caFile := range []string{"", filepath.Join(dir, pki.CACertFile)} {
		clientTLS, err := pki.ClientTLSFromFiles(dir, pki.CSRSigner.Name, pki.ClusterCA, caFile, "", "")
		if err != nil {
			t.Fatal(err)
		}
		clientTLS.ServerName = "localhost"
		nc, err := nats.Connect(ns.ClientURL(), nats.Secure(clientTLS))
		if err != nil {
			t.Fatalf("connect with CA file %q: %v", caFile, err)
		}
		nc.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != pki.CSRSigner.CommonName || seen[1] != pki.CSRSigner.CommonName {
		t.Fatalf("client certificates seen by NATS: %v, want %s twice", seen, pki.CSRSigner.CommonName)
	}
}

// TestReadCAFallsBack takes the first CA file given, else the kubeconfig's CA, and
// refuses when there is neither.
func TestReadCAFallsBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(other, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, pki.Scheduler.Name+".kubeconfig")
	if got, err := pki.ReadCA(kubeconfig, "", other); err != nil || string(got) != "first" {
		t.Errorf("ReadCA with a CA file: %q, %v; want the file's", got, err)
	}
	if got, err := pki.ReadCA(kubeconfig, ""); err != nil || string(got) != string(caPEM) {
		t.Errorf("ReadCA without CA files: %v; want the kubeconfig's CA", err)
	}
	if _, err := pki.ReadCA("", ""); err == nil {
		t.Error("ReadCA with no source: no error")
	}
}
