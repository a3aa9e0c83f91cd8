package natsserver_test

import (
	"bufio"
	"crypto/tls"
	"net"
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
	dir := newPKI(t)
	other := newPKI(t) // another cluster's CA and identities
	ns := startTLS(t, dir)
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
	ns := startTLS(t, newPKI(t))
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
