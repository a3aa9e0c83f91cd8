package natsserver_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
)

// newPKI makes a `skiff pki init` directory: a CA and every identity it issues.
func newPKI(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startTLS runs the server with dir's nats-server key pair, verifying clients against
// dir's CA.
func startTLS(t *testing.T, dir string) *natsserver.Server {
	t.Helper()
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// startFromPKI runs the server as the all-in-one does, from dir's configuration.
func startFromPKI(t *testing.T, dir string) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", PKIDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// servers are the ways the server runs: authentication alone, and the all-in-one's
// configuration with authorization.
var servers = []struct {
	name  string
	start func(t *testing.T, dir string) *natsserver.Server
}{
	{"TLS", startTLS},
	{"PKIDir", startFromPKI},
}

func clientTLS(t *testing.T, dir, identity string) *tls.Config {
	t.Helper()
	c, err := pki.ClientTLS(dir, identity)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientWithACertificateFromTheClusterCAConnects(t *testing.T) {
	dir := newPKI(t)
	ns := startTLS(t, dir)
	if !strings.HasPrefix(ns.ClientURL(), "tls://") {
		t.Errorf("ClientURL = %q, want tls://", ns.ClientURL())
	}
	// Both URL schemes work: nats.go upgrades a nats:// connection the server says
	// requires TLS.
	for _, url := range []string{ns.ClientURL(), strings.Replace(ns.ClientURL(), "tls://", "nats://", 1)} {
		nc, err := nats.Connect(url, nats.Secure(clientTLS(t, dir, pki.Scheduler.Name)))
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		sub, err := nc.SubscribeSync("skiff.events.default")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("skiff.events.default", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil || string(msg.Data) != "hello" {
			t.Fatalf("message over TLS: %v, %v", msg, err)
		}
		if !nc.TLSRequired() {
			t.Error("server does not announce tls_required")
		}
		nc.Close()
	}
}

func TestClientsWithoutACertificateFromTheClusterCAAreRefused(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) { clientsWithoutACertificateFromTheClusterCAAreRefused(t, srv.start) })
	}
}

func clientsWithoutACertificateFromTheClusterCAAreRefused(t *testing.T, start func(*testing.T, string) *natsserver.Server) {
	dir := newPKI(t)
	other := newPKI(t) // another cluster's CA and identities
	ns := start(t, dir)
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	foreignCert := clientTLS(t, other, pki.Scheduler.Name)
	foreignCert.RootCAs = ca.CertPool() // trusts the server; the server must not trust it

	cases := []struct {
		name string
		opts []nats.Option
	}{
		{"no TLS configured", nil},
		{"TLS without a client certificate", []nats.Option{nats.Secure(&tls.Config{RootCAs: ca.CertPool(), MinVersion: tls.VersionTLS12})}},
		{"client certificate from another CA", []nats.Option{nats.Secure(foreignCert)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]nats.Option{nats.Timeout(5 * time.Second), nats.NoReconnect()}, c.opts...)
			nc, err := nats.Connect(ns.ClientURL(), opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected; want refused")
			}
		})
	}
}

// TestPlaintextCannotInject speaks the NATS protocol in the clear, as anyone reaching
// port 4222 could: the server must close the connection without ever answering a PING,
// which it would do for a client whose PUB it accepted.
func TestPlaintextCannotInject(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) { plaintextCannotInject(t, srv.start) })
	}
}

func plaintextCannotInject(t *testing.T, start func(*testing.T, string) *natsserver.Server) {
	ns := start(t, newPKI(t))
	conn, err := net.Dial("tcp", strings.TrimPrefix(ns.ClientURL(), "tls://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a hang fails, it does not block
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, `"tls_required":true`) || !strings.Contains(info, `"tls_verify":true`) {
		t.Errorf("INFO does not require verified TLS: %s", info)
	}
	_, _ = conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPUB skiff.events.default 2\r\nhi\r\nPING\r\n"))
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "PONG") {
			t.Fatal("the server answered a plaintext client's PING")
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept a plaintext connection open")
			}
			return // closed: refused
		}
	}
}

func TestTLSWithoutClientCAsIsAnError(t *testing.T) {
	dir := newPKI(t)
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS.ClientCAs = nil
	if ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", TLS: serverTLS}); err == nil {
		ns.Shutdown()
		t.Fatal("started without a CA to verify clients against")
	}
}

func TestPKIDirAndTLSAreExclusive(t *testing.T) {
	dir := newPKI(t)
	serverTLS, err := pki.ServerTLS(dir, pki.NATSServerName)
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", PKIDir: dir, TLS: serverTLS}); err == nil {
		ns.Shutdown()
		t.Fatal("started with both a PKI directory and a TLS configuration")
	}
}

// TestPKIDirWithoutTheCalloutKeyIsAnError: a PKI directory from before the auth callout
// existed starts no server that would admit clients nobody can authorize.
func TestPKIDirWithoutTheCalloutKeyIsAnError(t *testing.T) {
	dir := newPKI(t)
	if err := os.Remove(filepath.Join(dir, pki.NATSAuthCalloutSeedFile)); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", PKIDir: dir})
	if err == nil {
		ns.Shutdown()
		t.Fatal("started without the callout's key")
	}
	if !strings.Contains(err.Error(), pki.NATSAuthCalloutSeedFile) {
		t.Errorf("error %q does not name %s", err, pki.NATSAuthCalloutSeedFile)
	}
}

// TestAClientOfTheClusterCAWaitsForTheAuthCallout: with the all-in-one's configuration a
// certificate from the cluster CA is not enough; until the apiserver answers the auth
// callout, nobody but the apiserver gets in.
func TestAClientOfTheClusterCAWaitsForTheAuthCallout(t *testing.T) {
	dir := newPKI(t)
	ns := startFromPKI(t, dir)
	if nc, err := nats.Connect(ns.ClientURL(), nats.Secure(clientTLS(t, dir, pki.Scheduler.Name)), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("the scheduler connected with nobody answering the auth callout")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(clientTLS(t, dir, pki.APIServerNATSClient.Name)), nats.NoReconnect())
	if err != nil {
		t.Fatalf("the apiserver's identity: %v", err)
	}
	nc.Close()
}

func TestRenderConfigRefusesWhatItCannotWrite(t *testing.T) {
	valid := natsserver.ConfigFile{Host: "0.0.0.0", Port: 4222, StoreDir: "/data", CertFile: "/etc/nats/nats-server.crt",
		KeyFile: "/etc/nats/nats-server.key", CAFile: "/etc/nats/ca.crt", CalloutIssuer: "ABJHLOVMPA4CI6R5KLNGOB4GSLNIY7IOUPAJC4YFNDLQVIOBYQGUWVLA"}
	if _, err := natsserver.RenderConfig(valid); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for name, change := range map[string]func(*natsserver.ConfigFile){
		"no issuer":                    func(c *natsserver.ConfigFile) { c.CalloutIssuer = "" },
		"no certificate":               func(c *natsserver.ConfigFile) { c.CertFile = "" },
		"a newline in a path":          func(c *natsserver.ConfigFile) { c.StoreDir = "/data\nport: 1" },
		"a control character in a key": func(c *natsserver.ConfigFile) { c.KeyFile = "/k\x00" },
	} {
		c := valid
		change(&c)
		if text, err := natsserver.RenderConfig(c); err == nil {
			t.Errorf("%s: rendered\n%s", name, text)
		}
	}
	// Quotes and backslashes are escaped, not ended on.
	c := valid
	c.StoreDir = `/da"ta\x`
	text, err := natsserver.RenderConfig(c)
	if err != nil || !strings.Contains(string(text), `store_dir: "/da\"ta\\x"`) {
		t.Fatalf("quoted store dir: %v\n%s", err, text)
	}
}
