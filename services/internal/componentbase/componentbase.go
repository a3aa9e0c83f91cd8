// Package componentbase is what every skiff component does the same way at startup, as
// k8s.io/component-base is for kube's: its client of the apiserver (a kubeconfig, the
// content type, a client-side rate limit, tracing), its connection to NATS for Events
// (mutual TLS, the publisher's user), and the process's life (signals, exit codes).
//
// Each component keeps kube's shape around it: Options (flags, validation) → Config
// (built clients, listeners, recorder) → Run(ctx), in services/<component>/app; its
// main parses flags and calls Main.
package componentbase

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/tracing"
)

// ClientOptions are a component's flags for reaching the apiserver, kube's
// ClientConnectionConfiguration (k8s.io/component-base/config): --kubeconfig,
// --kube-api-content-type, --kube-api-qps and --kube-api-burst.
type ClientOptions struct {
	// Kubeconfig is the kubeconfig's path; "" means the in-cluster configuration.
	Kubeconfig string
	// ContentType is what requests are sent as (kubeclient.SetContentType).
	ContentType string
	// QPS is the client-side rate limit in requests per second; < 0 means none (the
	// apiserver's own limits apply), 0 client-go's default (5).
	QPS float64
	// Burst is the token bucket's size, with QPS > 0.
	Burst int
}

// NewClientOptions returns ClientOptions with the content type kube's components send
// (protobuf) and qps, burst as the component's defaults.
func NewClientOptions(qps float64, burst int) ClientOptions {
	return ClientOptions{ContentType: kubeclient.DefaultContentType, QPS: qps, Burst: burst}
}

// AddFlags registers o's flags on fs; kubeconfigUsage says whose identity the
// kubeconfig holds.
func (o *ClientOptions) AddFlags(fs *flag.FlagSet, kubeconfigUsage string) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, kubeconfigUsage)
	fs.StringVar(&o.ContentType, "kube-api-content-type", o.ContentType,
		"content type of requests to the apiserver: application/vnd.kubernetes.protobuf or application/json")
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "requests per second to the apiserver; < 0 means no client-side limit (the apiserver's own limits apply), 0 client-go's default (5)")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "burst of requests to the apiserver, with --kube-api-qps > 0")
}

// RESTConfig loads o.Kubeconfig (the in-cluster configuration when "") and completes it
// with Complete. Errors: the kubeconfig does not load.
func (o *ClientOptions) RESTConfig(tp trace.TracerProvider, userAgent string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	o.Complete(cfg, tp, userAgent)
	return cfg, nil
}

// Complete sets on cfg what the kubeconfig does not say: content type, rate limit,
// user agent, and a transport that traces every request with tp (nil: none).
func (o *ClientOptions) Complete(cfg *rest.Config, tp trace.TracerProvider, userAgent string) {
	kubeclient.SetContentType(cfg, o.ContentType)
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	if userAgent != "" {
		cfg.UserAgent = userAgent
	}
	if tp != nil {
		cfg.WrapTransport = tracing.WrapTransport(tp)
	}
}

// NATSOptions are a component's flags for publishing its Events to NATS (JetStream
// stream EVENTS): --nats-url, and the mutual TLS NATS requires, --nats-ca-file,
// --nats-cert-file, --nats-key-file.
type NATSOptions struct {
	// URL is the NATS server; "" POSTs Events to the apiserver instead.
	URL string
	// CAFile verifies NATS's serving certificate.
	CAFile string
	// CertFile and KeyFile are the client pair presented to NATS.
	CertFile, KeyFile string
}

// AddFlags registers o's flags on fs, their defaults those of a control-plane component:
// the CA and client pair of its kubeconfig.
func (o *NATSOptions) AddFlags(fs *flag.FlagSet) {
	o.AddFlagsWithDefaults(fs, "the CA of --kubeconfig", "the client certificate of --kubeconfig", "the key of --kubeconfig")
}

// AddFlagsWithDefaults registers o's flags on fs, each usage ending with the default
// it names (a component whose defaults are not its kubeconfig's, as the kubelet).
func (o *NATSOptions) AddFlagsWithDefaults(fs *flag.FlagSet, caDefault, certDefault, keyDefault string) {
	fs.StringVar(&o.URL, "nats-url", o.URL, "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	fs.StringVar(&o.CAFile, "nats-ca-file", o.CAFile, "CA verifying NATS's serving certificate (default: "+caDefault+")")
	fs.StringVar(&o.CertFile, "nats-cert-file", o.CertFile, "client certificate toward NATS, which requires mutual TLS (default: "+certDefault+")")
	fs.StringVar(&o.KeyFile, "nats-key-file", o.KeyFile, "client key toward NATS (default: "+keyDefault+")")
}

// ClientTLS is the mutual TLS toward NATS (pki.NATSClientTLS: o's files, else cfg's CA
// and client pair) and the user its client certificate names, under whose subjects the
// component publishes. nil and "" without a URL. Errors: files that do not load, or
// only some of them given.
func (o *NATSOptions) ClientTLS(cfg *rest.Config) (*tls.Config, string, error) {
	tlsConfig, err := pki.NATSClientTLS(cfg, o.URL, o.CAFile, o.CertFile, o.KeyFile)
	if err != nil || tlsConfig == nil {
		return nil, "", err
	}
	user, err := pki.NATSUser(tlsConfig)
	if err != nil {
		return nil, "", err
	}
	return tlsConfig, user, nil
}

// Recorder is component's event recorder: over NATS as its client certificate's user
// when o.URL is set, else POSTing through client. It delivers nothing until started.
func (o *NATSOptions) Recorder(component string, cfg *rest.Config, client kubernetes.Interface) (*eventrecorder.Recorder, error) {
	tlsConfig, user, err := o.ClientTLS(cfg)
	if err != nil {
		return nil, err
	}
	return eventrecorder.New(eventrecorder.Config{Component: component, User: user, NATSURL: o.URL, TLS: tlsConfig, Client: client})
}

// UsageError is a flag value Options.Validate refuses: Main exits 2 on it, as flag does.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef wraps err as a UsageError; nil stays nil.
func Usagef(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{err}
}

// Main runs run with a context that ends on SIGINT or SIGTERM and returns the process's
// exit code: 0 when run returns nil or the context ended, 2 for a UsageError, 1 for any
// other error, which it logs with logger.
func Main(logger *slog.Logger, run func(context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx)
	var usage UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		logger.Error("invalid flags", "err", err)
		return 2
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return 0
	default:
		logger.Error("stopped", "err", err)
		return 1
	}
}

// Component is what a main runs: a component's Options (services/<component>/app).
type Component interface {
	// AddFlags registers the component's flags.
	AddFlags(fs *flag.FlagSet)
	// Logger validates the logging flags and returns the process's logger.
	Logger() *slog.Logger
	// Run validates the flags, builds the component's Config and runs it until ctx ends.
	Run(ctx context.Context) error
}

// Run is a component's whole main: it registers c's flags on the command line, parses
// it, runs c under Main and exits with Main's code.
func Run(c Component) {
	c.AddFlags(flag.CommandLine)
	flag.Parse()
	os.Exit(Main(c.Logger(), c.Run))
}
