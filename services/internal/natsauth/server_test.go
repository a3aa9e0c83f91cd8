package natsauth_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
)

// newPKI makes a `skiff pki init` directory: the CA, every identity, the callout's key.
func newPKI(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPermissionsOnTheEmbeddedServer runs the permission checks against the embedded
// server of the all-in-one (natsserver.Config.PKIDir).
func TestPermissionsOnTheEmbeddedServer(t *testing.T) {
	dir := newPKI(t)
	ns, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", PKIDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	checkPermissions(t, dir, ns.ClientURL())
}

// TestPermissionsWithTheComposeConfig renders the configuration compose's nats container
// runs (`skiff nats-config --cert-dir`), with the key pair and CA in a directory of their
// own as the container sees them, loads the file with nats-server's own
// server.ProcessConfigFile and runs the same permission checks against that server.
func TestPermissionsWithTheComposeConfig(t *testing.T) {
	dir := newPKI(t)
	certDir := filepath.Join(t.TempDir(), "etc-nats")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{pki.NATSServerName + ".crt", pki.NATSServerName + ".key", pki.CACertFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file, err := natsserver.ConfigFileFromPKI(dir, certDir)
	if err != nil {
		t.Fatal(err)
	}
	file.Host, file.Port, file.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	text, err := natsserver.RenderConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(text), dir) {
		t.Fatalf("the configuration names the PKI directory; the container sees only %s:\n%s", certDir, text)
	}
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the configuration: %v\n%s", err, text)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	checkPermissions(t, dir, srv.ClientURL())
}

// client is a connection that collects the errors NATS sends it asynchronously
// (permission violations).
type client struct {
	nc   *nats.Conn
	errs chan error
}

// connect dials url presenting the key pair kp with dir's CA, and user's inbox prefix
// when user is set.
func connect(t *testing.T, dir, url string, certPEM, keyPEM []byte, user string) (*client, error) {
	t.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{errs: make(chan error, 16)}
	opts := []nats.Option{
		nats.Secure(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.CertPool(), MinVersion: tls.VersionTLS12}),
		nats.NoReconnect(), nats.Timeout(10 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}
	if user != "" {
		inbox, err := natsauth.InboxPrefix(user)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if c.nc, err = nats.Connect(url, opts...); err != nil {
		return nil, err
	}
	t.Cleanup(c.nc.Close)
	return c, nil
}

// connectAs dials as a key pair of dir, which must be admitted.
func connectAs(t *testing.T, dir, url, name, user string) *client {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := connect(t, dir, url, certPEM, keyPEM, user)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	return c
}

// violation waits for NATS to refuse what (e.g. `Publish to "x"`).
func (c *client) violation(t *testing.T, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if strings.Contains(err.Error(), "Permissions Violation for "+what) {
				return
			}
		case <-timeout:
			t.Fatalf("NATS did not refuse %s", what)
		}
	}
}

// noViolation checks that NATS refused nothing the connection did so far.
func (c *client) noViolation(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.errs:
		t.Fatalf("NATS refused: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// checkPermissions runs the apiserver's auth callout against the server at url, made from
// dir, and checks what each identity may do there.
func checkPermissions(t *testing.T, dir, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	issuer, err := pki.LoadNATSAuthCalloutKey(filepath.Join(dir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	apiTLS, err := pki.ClientTLS(dir, pki.APIServerNATSClient.Name)
	if err != nil {
		t.Fatal(err)
	}
	responder := &natsauth.Responder{Issuer: issuer, ClientCAs: ca.CertPool()}
	done := make(chan error, 1)
	go func() { done <- responder.Run(ctx, url, nats.Secure(apiTLS)) }()
	t.Cleanup(func() { cancel(); <-done })

	// The apiserver owns JetStream: it makes the stream the others publish to.
	api := connectAs(t, dir, url, pki.APIServerNATSClient.Name, "")
	apiJS, err := jetstream.New(api.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apiJS.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{natsauth.EventSubjects}}); err != nil {
		t.Fatalf("the apiserver creates the stream: %v", err)
	}
	if _, err := apiJS.CreateOrUpdateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{Durable: "skiff-apiserver", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("the apiserver creates its consumer: %v", err)
	}
	allEvents, err := api.nc.SubscribeSync(natsauth.EventSubjects)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.nc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	api.noViolation(t)

	nodeA, err := ca.IssueClient("system:node:node-a", []string{"system:nodes"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Until the responder has subscribed, clients are refused.
	var node *client
	deadline := time.Now().Add(30 * time.Second)
	for node, err = connect(t, dir, url, nodeA.CertPEM, nodeA.KeyPEM, "system:node:node-a"); err != nil; node, err = connect(t, dir, url, nodeA.CertPEM, nodeA.KeyPEM, "system:node:node-a") {
		if time.Now().After(deadline) {
			t.Fatalf("node-a never connected: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ownSubject := "skiff.events.default.system:node:node-a"
	stored := 0

	t.Run("a node publishes under its own subject and JetStream acknowledges", func(t *testing.T) {
		js, err := jetstream.New(node.nc)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, ownSubject, []byte(`{}`))
		if err != nil || ack.Stream != "EVENTS" {
			t.Fatalf("publish: %+v, %v", ack, err)
		}
		stored++
		if msg, err := allEvents.NextMsg(5 * time.Second); err != nil || msg.Subject != ownSubject {
			t.Fatalf("the apiserver reads %v, %v; want the node's event", msg, err)
		}
	})
	t.Run("a node may not publish under another node's subject", func(t *testing.T) {
		if err := node.nc.Publish("skiff.events.default.system:node:node-b", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		node.violation(t, `Publish to "skiff.events.default.system:node:node-b"`)
	})
	t.Run("a node may not publish under a subject without a publisher", func(t *testing.T) {
		if err := node.nc.Publish("skiff.events.default", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		node.violation(t, `Publish to "skiff.events.default"`)
	})
	for _, subject := range []string{natsauth.EventSubjects, ownSubject, "_INBOX.>", "_INBOX.system:node:node-b.>", "$JS.API.>"} {
		t.Run("a node may not subscribe to "+subject, func(t *testing.T) {
			if _, err := node.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			node.violation(t, `Subscription to "`+subject+`"`)
		})
	}
	t.Run("a node subscribes to its own inbox", func(t *testing.T) {
		if _, err := node.nc.SubscribeSync("_INBOX.system:node:node-a.x.>"); err != nil {
			t.Fatal(err)
		}
		node.noViolation(t)
	})
	for _, subject := range []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.DELETE.EVENTS",
		"$JS.API.STREAM.UPDATE.EVENTS",
		"$JS.API.STREAM.PURGE.EVENTS",
		"$JS.API.CONSUMER.CREATE.EVENTS.thief",
		"$JS.API.CONSUMER.DURABLE.CREATE.EVENTS.skiff-apiserver",
		"$JS.API.CONSUMER.DELETE.EVENTS.skiff-apiserver",
		"$JS.API.CONSUMER.MSG.NEXT.EVENTS.skiff-apiserver",
	} {
		t.Run("a node may not request "+subject, func(t *testing.T) {
			if err := node.nc.PublishRequest(subject, node.nc.NewRespInbox(), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			node.violation(t, `Publish to "`+subject+`"`)
		})
	}
	t.Run("a node cannot have JetStream's acknowledgement delete the stream", func(t *testing.T) {
		// The acknowledgement goes to the reply subject the publisher names.
		if err := node.nc.PublishRequest(ownSubject, "$JS.API.STREAM.DELETE.EVENTS", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		stored++
		node.noViolation(t)
		time.Sleep(500 * time.Millisecond)
	})
	t.Run("the stream holds only what the node was allowed to publish", func(t *testing.T) {
		stream, err := apiJS.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatalf("the stream is gone: %v", err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(natsauth.EventSubjects))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != uint64(stored) || len(info.State.Subjects) != 1 || info.State.Subjects[ownSubject] != uint64(stored) {
			t.Fatalf("stream holds %d messages on %v; want %d on %s", info.State.Msgs, info.State.Subjects, stored, ownSubject)
		}
		if _, err := stream.Consumer(ctx, "skiff-apiserver"); err != nil {
			t.Fatalf("the apiserver's consumer is gone: %v", err)
		}
	})
	t.Run("the scheduler publishes its own events and no node's", func(t *testing.T) {
		sched := connectAs(t, dir, url, pki.Scheduler.Name, pki.Scheduler.CommonName)
		js, err := jetstream.New(sched.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "skiff.events.kube-system.system:kube-scheduler", []byte(`{}`)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if err := sched.nc.Publish(ownSubject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		sched.violation(t, `Publish to "`+ownSubject+`"`)
	})
	for _, refused := range []struct {
		name, cn string
		orgs     []string
	}{
		{"an admin (system:masters)", pki.Admin.CommonName, pki.Admin.Organizations},
		{"a node that is also a master", "system:node:node-a", []string{"system:nodes", "system:masters"}},
		{"a certificate whose name has no subject token", "system:skiff:my_tool", nil},
	} {
		t.Run(refused.name+" is refused at connect", func(t *testing.T) {
			kp, err := ca.IssueClient(refused.cn, refused.orgs, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := connect(t, dir, url, kp.CertPEM, kp.KeyPEM, ""); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
				t.Fatalf("connect: %v; want an authorization violation", err)
			}
		})
	}
	t.Run("the apiserver may use JetStream's API", func(t *testing.T) {
		if _, err := apiJS.AccountInfo(ctx); err != nil {
			t.Fatal(err)
		}
		api.noViolation(t)
	})
}
