package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"skiff.dev/services/internal/serving/delegating"
)

// SecureServingOptions are the flags of a component's secure port, where its
// /healthz, /livez, /readyz, /metrics and (with --profiling) /debug/pprof are served
// over HTTPS to callers the apiserver vouches for. They mirror what kube-scheduler and
// kube-controller-manager register from k8s.io/apiserver/pkg/server/options:
// SecureServingOptions (--bind-address, --secure-port, --tls-cert-file,
// --tls-private-key-file), DelegatingAuthenticationOptions (--client-ca-file,
// --authentication-token-webhook-cache-ttl) and DelegatingAuthorizationOptions
// (--authorization-always-allow-paths, --authorization-webhook-cache-*-ttl), with their
// defaults. The apiserver is reached with the component's own client (WithDelegatedAuth)
// rather than kube's --authentication-kubeconfig/--authorization-kubeconfig.
type SecureServingOptions struct {
	// BindAddress is the IP the secure port listens on; "0.0.0.0" (the default) is every
	// IPv4 interface, "::" every interface (--bind-address).
	BindAddress string
	// BindPort is the secure port; 0 serves none (--secure-port).
	BindPort int
	// Listener, when set, is served instead of listening on BindAddress:BindPort, as
	// kube's SecureServingOptions.Listener (tests pass one on a free port).
	Listener net.Listener
	// CertFile and KeyFile are the PEM serving certificate (followed by its
	// intermediates) and key, read at start; both empty serves a self-signed
	// certificate made in memory for localhost and 127.0.0.1, as kube's components do
	// (--tls-cert-file, --tls-private-key-file).
	CertFile, KeyFile string
	// ClientCAFile is the PEM bundle client certificates are verified against; ""
	// means the CA the component's kubeconfig trusts, which in skiff is the cluster CA
	// that issues every client certificate (--client-ca-file).
	ClientCAFile string
	// AlwaysAllowPaths may be requested by anyone, anonymous included, without a
	// SubjectAccessReview; an entry ending in "*" is a prefix
	// (--authorization-always-allow-paths).
	AlwaysAllowPaths []string
	// TokenCacheTTL is how long a TokenReview's answer is reused
	// (--authentication-token-webhook-cache-ttl).
	TokenCacheTTL time.Duration
	// AllowCacheTTL and DenyCacheTTL are how long an allowing and a refusing
	// SubjectAccessReview answer are reused (--authorization-webhook-cache-authorized-ttl,
	// --authorization-webhook-cache-unauthorized-ttl).
	AllowCacheTTL, DenyCacheTTL time.Duration
}

// NewSecureServingOptions are kube's defaults with port the component's secure port
// (kube-scheduler 10259, kube-controller-manager 10257; skiff's csr-signer 10260).
func NewSecureServingOptions(port int) *SecureServingOptions {
	return &SecureServingOptions{
		BindAddress:      "0.0.0.0",
		BindPort:         port,
		AlwaysAllowPaths: append([]string(nil), delegating.DefaultAlwaysAllowPaths...),
		TokenCacheTTL:    delegating.DefaultTokenCacheTTL,
		AllowCacheTTL:    delegating.DefaultAllowCacheTTL,
		DenyCacheTTL:     delegating.DefaultDenyCacheTTL,
	}
}

// AddFlags registers the secure port's flags on fs, defaulting to o's values.
func (o *SecureServingOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "IP the secure port listens on (0.0.0.0: every IPv4 interface, ::: every interface)")
	fs.IntVar(&o.BindPort, "secure-port", o.BindPort, "HTTPS port of /healthz, /livez, /readyz, /metrics and, with --profiling, /debug/pprof, authenticated and authorized by the apiserver (0 = none)")
	fs.StringVar(&o.CertFile, "tls-cert-file", o.CertFile, "PEM serving certificate of the secure port, followed by its intermediates (default: a self-signed certificate made in memory)")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", o.KeyFile, "PEM key of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "PEM CA bundle: a client certificate it verifies authenticates as its CommonName in its Organizations (default: the CA of --kubeconfig)")
	fs.Func("authorization-always-allow-paths", fmt.Sprintf("comma-separated paths anyone may GET on the secure port without authorization; a trailing * matches a prefix (default %q)", strings.Join(o.AlwaysAllowPaths, ",")), func(v string) error {
		o.AlwaysAllowPaths = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.AlwaysAllowPaths = append(o.AlwaysAllowPaths, p)
			}
		}
		return nil
	})
	fs.DurationVar(&o.TokenCacheTTL, "authentication-token-webhook-cache-ttl", o.TokenCacheTTL, "how long the apiserver's answer to a TokenReview is reused")
	fs.DurationVar(&o.AllowCacheTTL, "authorization-webhook-cache-authorized-ttl", o.AllowCacheTTL, "how long an allowing SubjectAccessReview answer is reused")
	fs.DurationVar(&o.DenyCacheTTL, "authorization-webhook-cache-unauthorized-ttl", o.DenyCacheTTL, "how long a refusing SubjectAccessReview answer is reused")
}

// Validate reports the first invalid option: a bind address that is not an IP, a port
// outside 0-65535, only one of the certificate and key, a negative cache TTL, or a
// malformed always-allow path.
func (o *SecureServingOptions) Validate() error {
	if net.ParseIP(o.BindAddress) == nil {
		return fmt.Errorf("--bind-address %q: want an IP", o.BindAddress)
	}
	if o.BindPort < 0 || o.BindPort > 65535 {
		return fmt.Errorf("--secure-port %d: want 0-65535", o.BindPort)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if o.TokenCacheTTL < 0 || o.AllowCacheTTL < 0 || o.DenyCacheTTL < 0 {
		return errors.New("the webhook cache TTLs must not be negative")
	}
	if _, err := delegating.NewAuthorizer(delegating.AuthorizerConfig{AlwaysAllowPaths: o.AlwaysAllowPaths}); err != nil {
		return fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	return nil
}

// delegation is the client a secure port asks the apiserver with (WithDelegatedAuth).
type delegation struct {
	client kubernetes.Interface
	config *rest.Config
}

// WithDelegatedAuth gives Options.Start the component's apiserver client: the secure
// port authenticates bearer tokens with its TokenReviews and authorizes requests with
// its SubjectAccessReviews, and verifies client certificates against the CA config
// trusts unless --client-ca-file names one. Start requires it when a secure port is
// set; Handler and Serve ignore it.
func WithDelegatedAuth(client kubernetes.Interface, config *rest.Config) Option {
	return func(e *endpoints) { e.delegation = &delegation{client: client, config: config} }
}

// start listens on BindAddress:BindPort now (or takes Listener) and serves handler
// there over TLS, behind the apiserver's authentication and authorization through d,
// until ctx ends. Errors: no d, an unreadable certificate or CA, or the listen failed.
func (o *SecureServingOptions) start(ctx context.Context, d *delegation, handler http.Handler) (net.Addr, error) {
	if d == nil || d.client == nil || d.config == nil {
		return nil, errors.New("--secure-port: no apiserver client to authenticate and authorize callers with (WithDelegatedAuth)")
	}
	cert, err := o.servingCertificate()
	if err != nil {
		return nil, err
	}
	clientCA, err := o.clientCA(d.config)
	if err != nil {
		return nil, err
	}
	authn := delegating.NewAuthenticator(delegating.AuthenticatorConfig{
		ClientCA: clientCA, TokenReviews: d.client.AuthenticationV1().TokenReviews(), CacheTTL: o.TokenCacheTTL,
	})
	authz, err := delegating.NewAuthorizer(delegating.AuthorizerConfig{
		SubjectAccessReviews: d.client.AuthorizationV1().SubjectAccessReviews(),
		AllowCacheTTL:        o.AllowCacheTTL, DenyCacheTTL: o.DenyCacheTTL,
		AlwaysAllowPaths: o.AlwaysAllowPaths, AlwaysAllowGroups: delegating.DefaultAlwaysAllowGroups,
	})
	if err != nil {
		return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	l := o.Listener
	if l == nil {
		if l, err = net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.BindPort))); err != nil {
			return nil, fmt.Errorf("--secure-port: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           delegating.WithAuth(handler, authn, authz),
		ReadHeaderTimeout: 10 * time.Second,
		// Certificates are verified by the authenticator, so that one that does not
		// verify is answered 401 rather than with a failed handshake (kube's
		// RequestClientCert).
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
	}
	slog.Info("serving securely", "address", l.Addr().String())
	go func() {
		if err := serve(ctx, srv, func() error { return srv.ServeTLS(l, "", "") }); err != nil {
			slog.Error("secure endpoints stopped", "address", l.Addr().String(), "err", err)
		}
	}()
	return l.Addr(), nil
}

// servingCertificate is CertFile and KeyFile, or a self-signed certificate for
// localhost and 127.0.0.1 made now, as kube-scheduler's
// MaybeDefaultWithSelfSignedCerts("localhost", nil, 127.0.0.1) with no certificate
// directory makes it.
func (o *SecureServingOptions) servingCertificate() (tls.Certificate, error) {
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("--tls-cert-file: %w", err)
		}
		return cert, nil
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	slog.Info("generated self-signed cert in-memory")
	return tls.X509KeyPair(certPEM, keyPEM)
}

// clientCA is ClientCAFile's pool, else that of the CA config trusts; nil when there
// is neither (no client certificate is then accepted).
func (o *SecureServingOptions) clientCA(config *rest.Config) (*x509.CertPool, error) {
	var pemData []byte
	switch {
	case o.ClientCAFile != "":
		data, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		pemData = data
	case len(config.TLSClientConfig.CAData) > 0:
		pemData = config.TLSClientConfig.CAData
	case config.TLSClientConfig.CAFile != "":
		data, err := os.ReadFile(config.TLSClientConfig.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the kubeconfig's CA: %w", err)
		}
		pemData = data
	default:
		slog.Warn("no --client-ca-file and the kubeconfig names no CA: client certificates are not accepted on the secure port")
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errors.New("client CA: no PEM certificate in it")
	}
	return pool, nil
}
