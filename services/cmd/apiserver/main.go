// Command apiserver serves skiff's Kubernetes API over etcd: HTTPS on --secure-port with
// the certificates of a `skiff pki init` directory, client certificates and bootstrap
// tokens for authentication. Mirrors kube-apiserver's main flags.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	etcdServers := flag.String("etcd-servers", "https://127.0.0.1:2379", "comma-separated etcd client URLs; https ones are dialed with mutual TLS")
	etcdCAFile := flag.String("etcd-cafile", "", "CA verifying etcd's serving certificate (default: <pki-dir>/etcd/ca.crt, the etcd CA)")
	etcdCertFile := flag.String("etcd-certfile", "", "client certificate toward etcd (default: <pki-dir>/apiserver-etcd-client.crt)")
	etcdKeyFile := flag.String("etcd-keyfile", "", "client key toward etcd (default: <pki-dir>/apiserver-etcd-client.key)")
	bindAddress := flag.String("bind-address", "0.0.0.0", "address the API listens on")
	securePort := flag.Int("secure-port", 6443, "HTTPS port of the API")
	pkiDir := flag.String("pki-dir", "/var/lib/skiff/pki", "`skiff pki init` directory: CA, apiserver and front-proxy-client certificates, bootstrap tokens")
	natsURL := flag.String("nats-url", "", "NATS URL whose JetStream EVENTS stream the apiserver persists (\"\" = events arrive by POST only)")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: <pki-dir>/ca.crt)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: <pki-dir>/apiserver-nats-client.crt)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: <pki-dir>/apiserver-nats-client.key)")
	natsCalloutKeyFile := flag.String("nats-auth-callout-key-file", "", "account nkey seed signing the answers to NATS's auth callout, whose public key is the issuer in NATS's configuration (skiff nats-config) (default: <pki-dir>/nats-auth-callout.nk)")
	execProxyURL := flag.String("exec-proxy-url", "", "exec-proxy base URL for pods/exec, attach, portforward and log, e.g. https://exec-proxy:10443 (\"\" = those answer 503)")
	saIssuer := flag.String("service-account-issuer", "", "iss of the service-account tokens the apiserver issues (default https://kubernetes.default.svc.cluster.local)")
	saJWKSURI := flag.String("service-account-jwks-uri", "", "jwks_uri of service-account issuer discovery (/.well-known/openid-configuration); default the issuer's URL with /openid/v1/jwks")
	apiAudiences := flag.String("api-audiences", "", "comma-separated audiences a service-account token must name one of, and the default of a TokenRequest (default: the issuer)")
	serviceClusterIPRange := flag.String("service-cluster-ip-range", apiserver.DefaultServiceClusterIPRange, "CIDR Service ClusterIPs are allocated from; its first address is the kubernetes Service's")
	serviceNodePortRange := flag.String("service-node-port-range", apiserver.DefaultServiceNodePortRange, "port range NodePorts are allocated from, e.g. 30000-32767")
	advertiseAddress := flag.String("advertise-address", "", "IP the kubernetes Service's endpoints point at (default: the host's default-route address)")
	maxInflight := flag.Int("max-requests-inflight", apiserver.DefaultMaxRequestsInFlight, "read-only requests (get, list) served at once; beyond, 429 (0 = unlimited; watches, streams, nodes and the control plane are not counted)")
	maxMutatingInflight := flag.Int("max-mutating-requests-inflight", apiserver.DefaultMaxMutatingRequestsInFlight, "mutating requests served at once; beyond, 429 (0 = unlimited)")
	compactionInterval := flag.Duration("etcd-compaction-interval", etcd3.DefaultCompactionInterval, "how often etcd's history is compacted; reads and watches older than one to two intervals get 410 (0 = never)")
	// Plain-HTTP /healthz, /metrics and, with --profiling, /debug/pprof: off unless asked
	// for, the API's own /healthz, /livez and /readyz are on --secure-port.
	srv := serving.NewOptions("")
	srv.AddFlags(flag.CommandLine)
	flag.Parse()

	logger := srv.Logger("apiserver")

	var etcdTLS *tls.Config
	if strings.Contains(*etcdServers, "https://") {
		var err error
		if etcdTLS, err = pki.ClientTLSFromFiles(*pkiDir, pki.APIServerEtcdClient.Name, pki.EtcdCA, *etcdCAFile, *etcdCertFile, *etcdKeyFile); err != nil {
			logger.Error("etcd client TLS", "err", err)
			os.Exit(1)
		}
	}
	// Without the flags ConfigFromPKI's apiserver-nats-client identity is used.
	var natsTLS *tls.Config
	if *natsCAFile != "" || *natsCertFile != "" || *natsKeyFile != "" {
		var err error
		if natsTLS, err = pki.ClientTLSFromFiles(*pkiDir, pki.APIServerNATSClient.Name, pki.ClusterCA, *natsCAFile, *natsCertFile, *natsKeyFile); err != nil {
			logger.Error("NATS client TLS", "err", err)
			os.Exit(1)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := srv.Start(ctx, serving.NewRegistry()); err != nil {
		logger.Error("health endpoints", "err", err)
		os.Exit(1)
	}
	var advertiseIP net.IP
	if *advertiseAddress != "" {
		if advertiseIP = net.ParseIP(*advertiseAddress); advertiseIP == nil {
			fmt.Fprintf(os.Stderr, "apiserver: --advertise-address %q is not an IP\n", *advertiseAddress)
			os.Exit(2)
		}
	}
	configure := func(cfg *apiserver.Config) {
		cfg.ServiceClusterIPRange, cfg.ServiceNodePortRange, cfg.AdvertiseAddress = *serviceClusterIPRange, *serviceNodePortRange, advertiseIP
		cfg.ServiceAccountIssuer = *saIssuer
		cfg.ServiceAccountJWKSURI = *saJWKSURI
		cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight = *maxInflight, *maxMutatingInflight
		cfg.EtcdCompactionInterval = *compactionInterval
		if *natsCalloutKeyFile != "" {
			cfg.NATSAuthCalloutSeedFile = *natsCalloutKeyFile
		}
		if *apiAudiences != "" {
			cfg.APIAudiences = strings.Split(*apiAudiences, ",")
		}
	}
	if err := run(ctx, *etcdServers, etcdTLS, net.JoinHostPort(*bindAddress, strconv.Itoa(*securePort)), *pkiDir, *natsURL, natsTLS, *execProxyURL, configure); err != nil {
		logger.Error("apiserver stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, etcdServers string, etcdTLS *tls.Config, addr, pkiDir, natsURL string, natsTLS *tls.Config, execProxyURL string, configure func(*apiserver.Config)) error {
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "apiserver"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// The etcd client reconnects on its own; the watch caches retry until etcd answers.
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(etcdServers, ","),
		DialTimeout: 5 * time.Second,
		Logger:      nil,
		DialOptions: []grpc.DialOption{tracing.GRPCClientOption(tp)},
		TLS:         etcdTLS,
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	cfg, err := apiserver.ConfigFromPKI(pkiDir, etcd)
	if err != nil {
		return err
	}
	cfg.NATSURL, cfg.ExecProxyURL = natsURL, execProxyURL
	if natsTLS != nil {
		cfg.NATSTLS = natsTLS
	}
	cfg.TracerProvider = tp
	configure(&cfg)
	api, err := apiserver.New(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	slog.Info("serving the API", "address", "https://"+l.Addr().String(), "etcd", etcdServers)
	return api.Serve(ctx, l)
}
