// Package app is the apiserver's startup, as kube's cmd/kube-apiserver/app: Options
// (every flag of the apiserver command) → Config (the built etcd client, PKI and
// listener) → Config.New (the built apiserver, a Server) → Server.Run. The apiserver
// command parses flags into Options and runs them; the all-in-one builds a Config from
// apiserver.ConfigFromPKI over its embedded etcd, and uses the Server's API (system
// namespaces, bootstrap policy) while Run serves it.
package app

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/apiserver/controller/kubernetesservice"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

// Options are the apiserver command's flags, kube-apiserver's main ones; each field is
// the flag named in its comment.
type Options struct {
	// EtcdServers are etcd's client URLs, comma-separated; https ones are dialed with
	// mutual TLS (--etcd-servers).
	EtcdServers string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile are the TLS toward etcd (--etcd-cafile,
	// --etcd-certfile, --etcd-keyfile; default the PKIDir's etcd CA and
	// apiserver-etcd-client pair).
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// BindAddress and SecurePort are where the API listens over HTTPS (--bind-address,
	// --secure-port).
	BindAddress string
	SecurePort  int
	// PKIDir is a `skiff pki init` directory: CA, serving and client certificates,
	// bootstrap tokens, service-account keys (--pki-dir).
	PKIDir string
	// NATSURL is the NATS whose JetStream EVENTS stream the apiserver persists
	// (--nats-url); "" means events arrive by POST only.
	NATSURL string
	// NATSCAFile, NATSCertFile and NATSKeyFile are the TLS toward NATS (--nats-ca-file,
	// --nats-cert-file, --nats-key-file); none given means PKIDir's
	// apiserver-nats-client pair and cluster CA.
	NATSCAFile, NATSCertFile, NATSKeyFile string
	// NATSAuthCalloutKeyFile is the account nkey seed signing NATS's auth callout
	// answers (--nats-auth-callout-key-file; default <pki-dir>/nats-auth-callout.nk).
	NATSAuthCalloutKeyFile string
	// ExecProxyURL is exec-proxy's base URL for pods/exec, attach, portforward and log
	// (--exec-proxy-url); "" answers those 503.
	ExecProxyURL string
	// ServiceAccountIssuer, ServiceAccountJWKSURI and APIAudiences (comma-separated)
	// are the service-account tokens' iss, discovery jwks_uri and accepted audiences
	// (--service-account-issuer, --service-account-jwks-uri, --api-audiences).
	ServiceAccountIssuer, ServiceAccountJWKSURI, APIAudiences string
	// ServiceClusterIPRange and ServiceNodePortRange are where ClusterIPs and NodePorts
	// come from (--service-cluster-ip-range, --service-node-port-range).
	ServiceClusterIPRange, ServiceNodePortRange string
	// AdvertiseAddress is the IP the kubernetes Service's endpoints point at
	// (--advertise-address); "" means the host's default-route address.
	AdvertiseAddress string
	// EndpointReconcilerType is how the kubernetes Service's endpoints are kept
	// (--endpoint-reconciler-type): lease (default) or none; master-count is refused.
	EndpointReconcilerType string
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight (--max-requests-inflight,
	// --max-mutating-requests-inflight): their sum is API Priority and Fairness's
	// server concurrency limit; with it disabled, they bound the read-only and the
	// mutating requests served at once (0 = unlimited).
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// EnablePriorityAndFairness (--enable-priority-and-fairness) queues and dispatches
	// requests by the FlowSchemas and PriorityLevelConfigurations in place of the
	// max-in-flight limits.
	EnablePriorityAndFairness bool
	// EtcdCompactionInterval is how often etcd's history is compacted
	// (--etcd-compaction-interval; 0 = never).
	EtcdCompactionInterval time.Duration
	// Serving are the logs and the plain-HTTP /healthz, /metrics and, with --profiling,
	// /debug/pprof: off unless asked for; the API's own /healthz, /livez and /readyz
	// are on SecurePort.
	Serving *serving.Options
}

// NewOptions returns the apiserver command's defaults, kube-apiserver's where it has
// the flag.
func NewOptions() *Options {
	return &Options{
		EtcdServers:                 "https://127.0.0.1:2379",
		BindAddress:                 "0.0.0.0",
		SecurePort:                  6443,
		PKIDir:                      "/var/lib/skiff/pki",
		ServiceClusterIPRange:       apiserver.DefaultServiceClusterIPRange,
		ServiceNodePortRange:        apiserver.DefaultServiceNodePortRange,
		EndpointReconcilerType:      string(kubernetesservice.LeaseEndpointReconcilerType),
		MaxRequestsInFlight:         apiserver.DefaultMaxRequestsInFlight,
		MaxMutatingRequestsInFlight: apiserver.DefaultMaxMutatingRequestsInFlight,
		EnablePriorityAndFairness:   true,
		EtcdCompactionInterval:      etcd3.DefaultCompactionInterval,
		Serving:                     serving.NewOptions(""),
	}
}

// AddFlags registers the apiserver command's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.EtcdServers, "etcd-servers", o.EtcdServers, "comma-separated etcd client URLs; https ones are dialed with mutual TLS")
	fs.StringVar(&o.EtcdCAFile, "etcd-cafile", o.EtcdCAFile, "CA verifying etcd's serving certificate (default: <pki-dir>/etcd/ca.crt, the etcd CA)")
	fs.StringVar(&o.EtcdCertFile, "etcd-certfile", o.EtcdCertFile, "client certificate toward etcd (default: <pki-dir>/apiserver-etcd-client.crt)")
	fs.StringVar(&o.EtcdKeyFile, "etcd-keyfile", o.EtcdKeyFile, "client key toward etcd (default: <pki-dir>/apiserver-etcd-client.key)")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address the API listens on")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "HTTPS port of the API")
	fs.StringVar(&o.PKIDir, "pki-dir", o.PKIDir, "`skiff pki init` directory: CA, apiserver and front-proxy-client certificates, bootstrap tokens")
	fs.StringVar(&o.NATSURL, "nats-url", o.NATSURL, "NATS URL whose JetStream EVENTS stream the apiserver persists (\"\" = events arrive by POST only)")
	fs.StringVar(&o.NATSCAFile, "nats-ca-file", o.NATSCAFile, "CA verifying NATS's serving certificate (default: <pki-dir>/ca.crt)")
	fs.StringVar(&o.NATSCertFile, "nats-cert-file", o.NATSCertFile, "client certificate toward NATS, which requires mutual TLS (default: <pki-dir>/apiserver-nats-client.crt)")
	fs.StringVar(&o.NATSKeyFile, "nats-key-file", o.NATSKeyFile, "client key toward NATS (default: <pki-dir>/apiserver-nats-client.key)")
	fs.StringVar(&o.NATSAuthCalloutKeyFile, "nats-auth-callout-key-file", o.NATSAuthCalloutKeyFile, "account nkey seed signing the answers to NATS's auth callout, whose public key is the issuer in NATS's configuration (skiff nats-config) (default: <pki-dir>/nats-auth-callout.nk)")
	fs.StringVar(&o.ExecProxyURL, "exec-proxy-url", o.ExecProxyURL, "exec-proxy base URL for pods/exec, attach, portforward and log, e.g. https://exec-proxy:10443 (\"\" = those answer 503)")
	fs.StringVar(&o.ServiceAccountIssuer, "service-account-issuer", o.ServiceAccountIssuer, "iss of the service-account tokens the apiserver issues (default https://kubernetes.default.svc.cluster.local)")
	fs.StringVar(&o.ServiceAccountJWKSURI, "service-account-jwks-uri", o.ServiceAccountJWKSURI, "jwks_uri of service-account issuer discovery (/.well-known/openid-configuration); default the issuer's URL with /openid/v1/jwks")
	fs.StringVar(&o.APIAudiences, "api-audiences", o.APIAudiences, "comma-separated audiences a service-account token must name one of, and the default of a TokenRequest (default: the issuer)")
	fs.StringVar(&o.ServiceClusterIPRange, "service-cluster-ip-range", o.ServiceClusterIPRange, "CIDR Service ClusterIPs are allocated from; its first address is the kubernetes Service's")
	fs.StringVar(&o.ServiceNodePortRange, "service-node-port-range", o.ServiceNodePortRange, "port range NodePorts are allocated from, e.g. 30000-32767")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "IP the kubernetes Service's endpoints point at (default: the host's default-route address)")
	fs.StringVar(&o.EndpointReconcilerType, "endpoint-reconciler-type", o.EndpointReconcilerType, "how the kubernetes Service's endpoints are kept: lease (each apiserver renews a lease in etcd; the endpoints list every live one) or none (kube's deprecated master-count is refused)")
	fs.IntVar(&o.MaxRequestsInFlight, "max-requests-inflight", o.MaxRequestsInFlight, "with --max-mutating-requests-inflight, the seats API Priority and Fairness shares among its priority levels (their sum); with it disabled, the read-only requests (get, list) served at once, beyond which 429 (0 = unlimited; watches, streams and system:masters are not counted)")
	fs.IntVar(&o.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInFlight, "added to --max-requests-inflight as API Priority and Fairness's seats; with it disabled, the mutating requests served at once, beyond which 429 (0 = unlimited)")
	fs.BoolVar(&o.EnablePriorityAndFairness, "enable-priority-and-fairness", o.EnablePriorityAndFairness, "if true, replace the max-in-flight handler with one that queues and dispatches requests with priority and fairness (FlowSchemas, PriorityLevelConfigurations)")
	fs.DurationVar(&o.EtcdCompactionInterval, "etcd-compaction-interval", o.EtcdCompactionInterval, "how often etcd's history is compacted; reads and watches older than one to two intervals get 410 (0 = never)")
	o.Serving.AddFlags(fs)
}

// Validate reports the first flag value the apiserver refuses, as a
// componentbase.UsageError (exit 2): the logging and serving options, an
// --advertise-address that is not an IP, an --endpoint-reconciler-type other than lease
// and none, or in-flight limits that add up to nothing while API Priority and Fairness
// is enabled (kube-apiserver's message).
func (o *Options) Validate() error {
	if err := o.Serving.Validate(); err != nil {
		return componentbase.Usagef(err)
	}
	if o.AdvertiseAddress != "" && net.ParseIP(o.AdvertiseAddress) == nil {
		return componentbase.Usagef(fmt.Errorf("--advertise-address %q is not an IP", o.AdvertiseAddress))
	}
	if err := kubernetesservice.ValidateReconcilerType(kubernetesservice.ReconcilerType(o.EndpointReconcilerType)); err != nil {
		return componentbase.Usagef(err)
	}
	if o.EnablePriorityAndFairness && o.MaxRequestsInFlight+o.MaxMutatingRequestsInFlight <= 0 {
		return componentbase.Usagef(fmt.Errorf("invalid configuration: MaxRequestsInFlight=%d and MaxMutatingRequestsInFlight=%d; they must add up to something positive", o.MaxRequestsInFlight, o.MaxMutatingRequestsInFlight))
	}
	return nil
}

// Logger validates the logging flags, makes their logger slog's default and returns
// it; invalid ones exit 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("apiserver") }

// Run serves the API until ctx ends: Validate, Config, Config.Run, then the etcd client
// and the tracer provider Config made are closed. Errors: Validate's (UsageError),
// Config's and Run's.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(cfg.API.TracerProvider)
	defer cfg.API.Etcd.Close()
	return cfg.Run(ctx)
}

// Config builds the apiserver of o, as kube-apiserver's CreateServerChain prepares it:
// the TLS toward etcd (https URLs) and NATS (when the flags name files), a tracer
// provider (OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set), an etcd client (which
// reconnects on its own: nothing is dialed yet), and apiserver.ConfigFromPKI of
// --pki-dir with the flags' settings. It listens on nothing: Run does, on
// --bind-address:--secure-port. Errors name the step that failed; what was made is
// released then.
func (o *Options) Config(ctx context.Context) (_ *Config, err error) {
	var etcdTLS *tls.Config
	if strings.Contains(o.EtcdServers, "https://") {
		if etcdTLS, err = pki.ClientTLSFromFiles(o.PKIDir, pki.APIServerEtcdClient.Name, pki.EtcdCA, o.EtcdCAFile, o.EtcdCertFile, o.EtcdKeyFile); err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	// Without the flags ConfigFromPKI's apiserver-nats-client identity is used.
	var natsTLS *tls.Config
	if o.NATSCAFile != "" || o.NATSCertFile != "" || o.NATSKeyFile != "" {
		if natsTLS, err = pki.ClientTLSFromFiles(o.PKIDir, pki.APIServerNATSClient.Name, pki.ClusterCA, o.NATSCAFile, o.NATSCertFile, o.NATSKeyFile); err != nil {
			return nil, fmt.Errorf("NATS client TLS: %w", err)
		}
	}
	var advertiseIP net.IP
	if o.AdvertiseAddress != "" {
		if advertiseIP = net.ParseIP(o.AdvertiseAddress); advertiseIP == nil {
			return nil, componentbase.Usagef(fmt.Errorf("--advertise-address %q is not an IP", o.AdvertiseAddress))
		}
	}
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "apiserver"})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		if err != nil {
			componentbase.ShutdownTracing(tp)
		}
	}()
	// The etcd client reconnects on its own; the watch caches retry until etcd answers.
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(o.EtcdServers, ","),
		DialTimeout: 5 * time.Second,
		Logger:      nil,
		DialOptions: []grpc.DialOption{tracing.GRPCClientOption(tp)},
		TLS:         etcdTLS,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	defer func() {
		if err != nil {
			etcd.Close()
		}
	}()
	api, err := apiserver.ConfigFromPKI(o.PKIDir, etcd)
	if err != nil {
		return nil, err
	}
	api.NATSURL, api.ExecProxyURL = o.NATSURL, o.ExecProxyURL
	if natsTLS != nil {
		api.NATSTLS = natsTLS
	}
	api.TracerProvider = tp
	api.ServiceClusterIPRange, api.ServiceNodePortRange, api.AdvertiseAddress = o.ServiceClusterIPRange, o.ServiceNodePortRange, advertiseIP
	api.EndpointReconcilerType = kubernetesservice.ReconcilerType(o.EndpointReconcilerType)
	api.ServiceAccountIssuer = o.ServiceAccountIssuer
	api.ServiceAccountJWKSURI = o.ServiceAccountJWKSURI
	api.MaxRequestsInFlight, api.MaxMutatingRequestsInFlight = o.MaxRequestsInFlight, o.MaxMutatingRequestsInFlight
	api.EnablePriorityAndFairness = o.EnablePriorityAndFairness
	api.EtcdCompactionInterval = o.EtcdCompactionInterval
	if o.NATSAuthCalloutKeyFile != "" {
		api.NATSAuthCalloutSeedFile = o.NATSAuthCalloutKeyFile
	}
	if o.APIAudiences != "" {
		api.APIAudiences = strings.Split(o.APIAudiences, ",")
	}
	return &Config{
		API:     api,
		Address: net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)),
		Serving: o.Serving,
	}, nil
}
