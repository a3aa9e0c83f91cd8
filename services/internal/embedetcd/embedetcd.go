// Package embedetcd runs a single-member etcd server inside the current process, for the
// all-in-one skiff binary and for tests that need a real etcd.
package embedetcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"skiff.dev/services/internal/pki"
)

// singleMemberTickMs is the raft tick of the single member (etcd's --heartbeat-interval).
const singleMemberTickMs = 10

// singleMemberCatchUpEntries is how much of the raft log the single member keeps in
// memory after a snapshot (etcd's --snapshot-catchup-entries).
const singleMemberCatchUpEntries = 500

// Config says where the embedded etcd keeps its data and listens.
type Config struct {
	// Dir holds etcd's data (member/ wal and snap); created if missing.
	Dir string
	// ClientURL is where clients connect, e.g. "http://127.0.0.1:2379". Port 0 picks a
	// free port; Etcd.Endpoint reports the one in use.
	ClientURL string
	// PeerURL is the raft peer listener; default "http://127.0.0.1:0" (https with
	// PKIDir).
	PeerURL string
	// PKIDir, when set, makes etcd require mutual TLS as kubeadm's etcd does: it serves
	// pki's etcd/server key pair (etcd/peer toward peers), accepts only clients whose
	// certificate the etcd CA issued and whose CN is one of pki.EtcdClientCommonNames
	// (etcd's allowed-cn), and Client presents the apiserver-etcd-client pair. The URLs
	// must then be https. "" serves plain HTTP (the storage layer's own tests).
	PKIDir string
}

// Etcd is a running embedded etcd server.
type Etcd struct {
	mu        sync.Mutex
	server    *embed.Etcd // nil while stopped
	cfg       Config      // with the ports Start resolved, for Restart
	endpoint  string
	clientTLS *tls.Config
}

// Start launches etcd and waits up to 60 s until it serves clients. Returns an error if
// the data directory is unusable, a port is taken or etcd does not become ready.
func Start(ctx context.Context, cfg Config) (*Etcd, error) {
	ec := embed.NewConfig()
	ec.Name = "skiff"
	ec.Dir = cfg.Dir
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// One member, no peers: the raft tick only paces the first election. etcd fast-forwards
	// a single member's election to its last tick, but raft draws the timeout at random in
	// [election, 2×election), so with etcd's defaults (100 ms ticks, 1 s election) a fresh
	// start waited 0.1–1.1 s for leadership, most of the all-in-one's cold start. With 10 ms
	// ticks it waits 10–110 ms; the leader's idle heartbeat tick goes to no peer.
	ec.TickMs, ec.ElectionMs = singleMemberTickMs, 10*singleMemberTickMs
	// etcd keeps the raft log's last SnapshotCatchUpEntries entries (default 5,000) in
	// memory for a slow follower to catch up from; each holds a whole write (a pod is
	// several KiB), ~12 MiB of the all-in-one's heap at 5,000 pods. One member has no
	// follower.
	ec.SnapshotCatchUpEntries = singleMemberCatchUpEntries
	if cfg.ClientURL == "" {
		cfg.ClientURL = "http://127.0.0.1:2379"
	}
	if cfg.PeerURL == "" {
		cfg.PeerURL = "http://127.0.0.1:0"
		if cfg.PKIDir != "" {
			cfg.PeerURL = "https://127.0.0.1:0"
		}
	}
	clientURL, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcd client url %q: %w", cfg.ClientURL, err)
	}
	peerURL, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcd peer url %q: %w", cfg.PeerURL, err)
	}
	// Resolve port 0 up front so the advertised URLs are real ones.
	if clientURL.Port() == "0" {
		if clientURL.Host, err = freeHostPort(clientURL.Hostname()); err != nil {
			return nil, err
		}
	}
	if peerURL.Port() == "0" {
		if peerURL.Host, err = freeHostPort(peerURL.Hostname()); err != nil {
			return nil, err
		}
	}
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ListenMetricsUrls = nil
	// etcd's HTTP gateway to its gRPC API is a second client of the server, dialing it
	// with the serving certificate; nothing here speaks it, so it is not served.
	ec.EnableGRPCGateway = false
	var clientTLS *tls.Config
	if cfg.PKIDir != "" {
		if clientURL.Scheme != "https" || peerURL.Scheme != "https" {
			return nil, fmt.Errorf("etcd with TLS needs https URLs, not %s and %s", clientURL, peerURL)
		}
		etcdCA, _ := pki.EtcdCA.Files(cfg.PKIDir)
		certFile, keyFile := pki.KeyPairFiles(cfg.PKIDir, pki.EtcdServerName)
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: etcdCA, ClientCertAuth: true,
			AllowedCNs: pki.EtcdClientCommonNames}
		peerCert, peerKey := pki.KeyPairFiles(cfg.PKIDir, pki.EtcdPeerName)
		ec.PeerTLSInfo = transport.TLSInfo{CertFile: peerCert, KeyFile: peerKey, TrustedCAFile: etcdCA, ClientCertAuth: true}
		if clientTLS, err = pki.ClientTLSOf(cfg.PKIDir, pki.APIServerEtcdClient.Name, pki.EtcdCA); err != nil {
			return nil, fmt.Errorf("etcd client identity: %w", err)
		}
		// Client dials from this process, whatever address etcd binds (0.0.0.0, a LAN
		// address): it verifies etcd by the name every etcd-server certificate holds.
		clientTLS.ServerName = "localhost"
	}

	server, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-server.Server.ReadyNotify():
	case err := <-server.Err():
		server.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		server.Close()
		return nil, fmt.Errorf("etcd did not become ready within 60s")
	case <-ctx.Done():
		server.Close()
		return nil, ctx.Err()
	}
	cfg.ClientURL, cfg.PeerURL = clientURL.String(), peerURL.String()
	return &Etcd{server: server, cfg: cfg, endpoint: clientURL.String(), clientTLS: clientTLS}, nil
}

// Endpoint is the client URL, e.g. "https://127.0.0.1:2379".
func (e *Etcd) Endpoint() string { return e.endpoint }

// Client returns a new etcd client connected to this server (over mutual TLS as the
// apiserver when the server has a PKIDir); the caller closes it. opts are added to the
// gRPC dial options (e.g. tracing.GRPCClientOption).
func (e *Etcd) Client(opts ...grpc.DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   []string{e.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: opts,
	}
	if e.clientTLS != nil {
		cfg.TLS = e.clientTLS.Clone()
	} else {
		cfg.DialOptions = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	}
	return clientv3.New(cfg)
}

// Close stops etcd and waits for it to release its ports and data directory. Closing a
// stopped etcd does nothing.
func (e *Etcd) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server != nil {
		e.server.Close()
		e.server = nil
	}
}

// Restart stops etcd if it runs and starts it again on the same data directory and
// the same client and peer URLs, as a restarted etcd pod does: clients connected to
// Endpoint reconnect to it and find every committed write (an InProcessClient is bound
// to the stopped server and does not). Errors as Start's.
func (e *Etcd) Restart(ctx context.Context) error {
	e.Close()
	next, err := Start(ctx, e.cfg)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.server = next.server
	return nil
}

func freeHostPort(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("pick a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// RunTests is a package's TestMain around one shared embedded etcd: it starts etcd in a
// temporary directory (plain HTTP on a free loopback port), sets *client to a client of
// it, runs m, and removes everything. It returns m.Run's exit code, or 1 when etcd does
// not start within 90 s. Use: func TestMain(m *testing.M) { os.Exit(embedetcd.RunTests(m, &client)) }.
func RunTests(m *testing.M, client **clientv3.Client) int {
	dir, err := os.MkdirTemp("", "embedetcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := Start(ctx, Config{Dir: dir, ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	if *client, err = e.Client(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer (*client).Close()
	return m.Run()
}
