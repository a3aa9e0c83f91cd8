package pki

import (
	"crypto"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestInitIsIdempotentAndIssuesIdentities(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	written, err := Init(InitOptions{Dir: dir, APIServerHosts: []string{"skiff.example", "10.1.2.3"}, Hosts: []string{"10.9.8.7"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(written, CACertFile) || !slices.Contains(written, BootstrapKubeconfigFile) {
		t.Fatalf("first Init wrote %v", written)
	}
	before, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Init(InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second Init wrote %v; want nothing (existing files are kept)", again)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if string(before) != string(after) {
		t.Fatal("second Init replaced the CA key")
	}

	pools := map[Authority]*x509.CertPool{}
	for _, a := range []Authority{ClusterCA, EtcdCA, FrontProxyCA} {
		ca, err := LoadAuthority(dir, a)
		if err != nil {
			t.Fatal(err)
		}
		pools[a] = ca.CertPool()
	}
	// verify checks that the pair name chains to the authority a, and to no other.
	verify := func(name string, a Authority, usage x509.ExtKeyUsage) *x509.Certificate {
		t.Helper()
		certFile, keyFile := KeyPairFiles(dir, name)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cert, _ := x509.ParseCertificate(pair.Certificate[0])
		for other, pool := range pools {
			_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
			if other == a && err != nil {
				t.Fatalf("%s does not verify against %s: %v", name, a.Name, err)
			}
			if other != a && err == nil {
				t.Fatalf("%s verifies against %s; want %s only", name, other.Name, a.Name)
			}
		}
		return cert
	}
	api := verify(APIServerName, ClusterCA, x509.ExtKeyUsageServerAuth)
	for _, host := range []string{"localhost", "apiserver", "skiff.example", "127.0.0.1", "10.1.2.3", "10.9.8.7"} {
		if err := api.VerifyHostname(host); err != nil {
			t.Errorf("apiserver certificate: %v", err)
		}
	}
	for _, s := range []struct {
		name string
		a    Authority
		host string
	}{{EtcdServerName, EtcdCA, "etcd"}, {EtcdPeerName, EtcdCA, "etcd"}, {NATSServerName, ClusterCA, "nats"}, {ExecProxyServingName, ClusterCA, "exec-proxy"}} {
		cert := verify(s.name, s.a, x509.ExtKeyUsageServerAuth)
		// Hosts name the control plane's host in every serving certificate; the
		// apiserver's own names stay the apiserver's.
		for _, host := range []string{s.host, "10.9.8.7"} {
			if err := cert.VerifyHostname(host); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}
		if err := cert.VerifyHostname("10.1.2.3"); err == nil {
			t.Errorf("%s is valid for the apiserver's extra host 10.1.2.3", s.name)
		}
	}
	for _, c := range []struct {
		id Identity
		a  Authority
	}{{APIServerEtcdClient, EtcdCA}, {EtcdHealthcheckClient, EtcdCA}, {FrontProxyClient, FrontProxyCA}, {APIServerNATSClient, ClusterCA}} {
		if cn := verify(c.id.Name, c.a, x509.ExtKeyUsageClientAuth).Subject.CommonName; cn != c.id.CommonName {
			t.Errorf("%s: CN %q", c.id.Name, cn)
		}
	}
	for _, id := range Identities {
		cert := verify(id.Name, ClusterCA, x509.ExtKeyUsageClientAuth)
		if cert.Subject.CommonName != id.CommonName || !slices.Equal(cert.Subject.Organization, id.Organizations) {
			t.Errorf("%s: subject %v, want CN=%s O=%v", id.Name, cert.Subject, id.CommonName, id.Organizations)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, id.Name+".kubeconfig"))
		if err != nil {
			t.Fatalf("%s kubeconfig: %v", id.Name, err)
		}
		if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 || len(cfg.CertData) == 0 {
			t.Errorf("%s kubeconfig: host %q, CA %d bytes, cert %d bytes", id.Name, cfg.Host, len(cfg.CAData), len(cfg.CertData))
		}
	}

	tokens, err := ReadBootstrapTokens(filepath.Join(dir, BootstrapTokenFile))
	if err != nil || len(tokens) != 1 {
		t.Fatalf("tokens %v, %v", tokens, err)
	}
	boot, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, BootstrapKubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if boot.BearerToken != tokens[0].String() {
		t.Errorf("bootstrap kubeconfig token %q, want %q", boot.BearerToken, tokens[0])
	}
}

func TestInitRejectsPlainHTTPServer(t *testing.T) {
	if _, err := Init(InitOptions{Dir: t.TempDir(), APIServerURL: "http://127.0.0.1:6443"}); err == nil {
		t.Fatal("Init accepted an http:// apiserver URL")
	}
}

func TestBootstrapTokenFormat(t *testing.T) {
	tok, err := NewBootstrapToken(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := ParseBootstrapToken(tok.String()); !ok {
		t.Fatalf("NewBootstrapToken made %q, which does not parse", tok)
	}
	expired := BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef", Expiration: time.Now().Add(-time.Minute).UTC().Truncate(time.Second)}
	parsed, err := ParseBootstrapTokens(FormatBootstrapTokens([]BootstrapToken{tok, expired}))
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed) != 2 || parsed[0] != tok || !parsed[1].Expiration.Equal(expired.Expiration) {
		t.Fatalf("round trip: %+v", parsed)
	}
	if parsed[0].Expired(time.Now()) || !parsed[1].Expired(time.Now()) {
		t.Error("Expired is wrong")
	}
	for _, bad := range []string{"abc.def", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcdef,yesterday"} {
		if _, err := ParseBootstrapTokens([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestInitMakesServiceAccountKeyAndKeepsIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	written, err := Init(InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(written, ServiceAccountKeyFile) || !slices.Contains(written, ServiceAccountPublicKeyFile) {
		t.Fatalf("Init wrote %v; want %s and %s", written, ServiceAccountKeyFile, ServiceAccountPublicKeyFile)
	}
	keyPEM, _ := os.ReadFile(filepath.Join(dir, ServiceAccountKeyFile))
	pubPEM, _ := os.ReadFile(filepath.Join(dir, ServiceAccountPublicKeyFile))
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// kubeadm's form: RSA 2048 in a PKCS#1 block, so tokens are RS256.
	if rsaKey, ok := key.(*rsa.PrivateKey); !ok || rsaKey.N.BitLen() != 2048 || !strings.HasPrefix(string(keyPEM), "-----BEGIN RSA PRIVATE KEY-----") {
		t.Errorf("sa.key is a %T, want an RSA 2048 PKCS#1 key:\n%.40s", key, keyPEM)
	}
	pubs, err := ParsePublicKeysPEM(pubPEM)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("sa.pub: %v keys, %v", len(pubs), err)
	}
	if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pubs[0]) {
		t.Fatal("sa.pub is not sa.key's public key")
	}

	// A lost sa.pub is derived again from the sa.key that is kept.
	if err := os.Remove(filepath.Join(dir, ServiceAccountPublicKeyFile)); err != nil {
		t.Fatal(err)
	}
	written, err = Init(InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(written, []string{ServiceAccountPublicKeyFile}) {
		t.Fatalf("Init after removing sa.pub wrote %v", written)
	}
	again, _ := os.ReadFile(filepath.Join(dir, ServiceAccountPublicKeyFile))
	kept, _ := os.ReadFile(filepath.Join(dir, ServiceAccountKeyFile))
	if string(again) != string(pubPEM) || string(kept) != string(keyPEM) {
		t.Fatal("Init replaced the service-account key instead of keeping it")
	}
}

// TestInitMovesAnOlderLayoutToItsAuthorities: a directory where the cluster CA issued
// the apiserver's etcd and front-proxy clients (the layout before etcd and the
// front-proxy had CAs of their own) gets those pairs issued again by their own
// authorities, and the files only that layout used are removed.
func TestInitMovesAnOlderLayoutToItsAuthorities(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := Init(InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []Identity{APIServerEtcdClient, FrontProxyClient} {
		kp, err := ca.IssueClient(id.CommonName, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := KeyPairFiles(dir, id.Name)
		if err := os.WriteFile(certFile, kp.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range obsoleteFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	written, err := Init(InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id Identity
		a  Authority
	}{{APIServerEtcdClient, EtcdCA}, {FrontProxyClient, FrontProxyCA}} {
		if !slices.Contains(written, c.id.Name+".crt") {
			t.Errorf("Init kept the cluster-CA %s; wrote %v", c.id.Name, written)
		}
		authority, err := LoadAuthority(dir, c.a)
		if err != nil {
			t.Fatal(err)
		}
		certFile, _ := KeyPairFiles(dir, c.id.Name)
		data, _ := os.ReadFile(certFile)
		cert, err := ParseCertPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := cert.CheckSignatureFrom(authority.Cert); err != nil {
			t.Errorf("%s is not %s's: %v", c.id.Name, c.a.Name, err)
		}
	}
	for _, name := range obsoleteFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", name, err)
		}
	}
}

// TestInitReplacesAnExpiredBootstrapToken: a directory whose bootstrap tokens have all
// expired gets a fresh one with Init's lifetime, and the bootstrap kubeconfig holds it;
// a valid token is kept.
func TestInitReplacesAnExpiredBootstrapToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := Init(InitOptions{Dir: dir, TokenTTL: DefaultBootstrapTokenTTL}); err != nil {
		t.Fatal(err)
	}
	tokenPath := filepath.Join(dir, BootstrapTokenFile)
	expired := BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef", Expiration: time.Now().Add(-time.Minute).UTC().Truncate(time.Second)}
	if err := os.WriteFile(tokenPath, FormatBootstrapTokens([]BootstrapToken{expired}), 0o600); err != nil {
		t.Fatal(err)
	}
	written, err := Init(InitOptions{Dir: dir, TokenTTL: DefaultBootstrapTokenTTL})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(written, BootstrapTokenFile) || !slices.Contains(written, BootstrapKubeconfigFile) {
		t.Fatalf("Init wrote %v; want a new token and the kubeconfig holding it", written)
	}
	tokens, err := ReadBootstrapTokens(tokenPath)
	if err != nil || len(tokens) != 1 || tokens[0].ID == expired.ID {
		t.Fatalf("tokens %+v, %v; want one new token", tokens, err)
	}
	if left := time.Until(tokens[0].Expiration); left < 23*time.Hour || left > DefaultBootstrapTokenTTL {
		t.Errorf("the new token expires in %v; want Init's 24h", left)
	}
	boot, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, BootstrapKubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if boot.BearerToken != tokens[0].String() {
		t.Errorf("bootstrap kubeconfig holds %q, want the new token", boot.BearerToken)
	}
	if again, err := Init(InitOptions{Dir: dir, TokenTTL: DefaultBootstrapTokenTTL}); err != nil || len(again) != 0 {
		t.Errorf("Init with a valid token wrote %v, %v; want nothing", again, err)
	}
}
