package serving

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Options are the flags every skiff service shares: logging, the plain-HTTP health and
// metrics endpoint, profiling, and for a control-plane component its secure port. They
// mirror kube's component-base options (--v/--logging-format of logs.Options,
// --healthz-bind-address/--metrics-bind-address, --profiling) and, in SecureServing,
// kube-scheduler's and kube-controller-manager's secure serving, folded into one set
// every service shares. A main builds them with NewOptions (and
// NewSecureServingOptions), registers them with AddFlags, then calls Logger and Start.
type Options struct {
	// LogLevel is slog's level name: debug, info, warn or error (--log-level).
	LogLevel string
	// LogFormat is json (slog's JSONHandler, one object per line) or text (key=value)
	// (--log-format; kube's --logging-format).
	LogFormat string
	// HealthAddress is host:port where /healthz, /livez, /readyz and /metrics are served
	// over plain HTTP; "" serves none (--health-address).
	HealthAddress string
	// MetricsAddress, when set, is host:port where /metrics (and with Profiling
	// /debug/pprof) are served over plain HTTP instead of on HealthAddress, which then
	// answers the probes only, as kube-proxy's --metrics-bind-address beside its
	// --healthz-bind-address (--metrics-bind-address).
	MetricsAddress string
	// Profiling adds Go's /debug/pprof to the listener that serves /metrics
	// (MetricsAddress, else HealthAddress) and to the secure port (--profiling).
	Profiling bool
	// SecureServing, when set, is the component's secure port, which serves the same
	// endpoints over HTTPS to callers the apiserver authenticates and authorizes; nil
	// for a service without one.
	SecureServing *SecureServingOptions
}

// Log formats of --log-format.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// NewOptions are the defaults every service shares (level info, JSON logs, no
// profiling), with healthAddress the service's own default port ("" = off), e.g.
// ":10259" for the scheduler as kube-scheduler's.
func NewOptions(healthAddress string) *Options {
	return &Options{LogLevel: "info", LogFormat: LogFormatJSON, HealthAddress: healthAddress}
}

// AddFlags registers --log-level, --log-format, --health-address and --profiling on fs,
// and SecureServing's flags when set, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: json (one object per line) or text (key=value)")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "host:port where /healthz, /livez, /readyz and /metrics are served over plain HTTP, without authentication (\"\" = off)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "host:port where /metrics and, with --profiling, /debug/pprof are served over plain HTTP, without authentication, instead of on --health-address (\"\" = on --health-address)")
	where := "--metrics-bind-address or --health-address"
	if o.SecureServing != nil {
		where = "--secure-port, and on --metrics-bind-address or --health-address"
		o.SecureServing.AddFlags(fs)
	}
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve Go's /debug/pprof on "+where)
}

// secure reports whether o serves a secure port.
func (o *Options) secure() bool {
	return o.SecureServing != nil && (o.SecureServing.BindPort != 0 || o.SecureServing.Listener != nil)
}

// Validate reports the first invalid option: an unknown level or format, --profiling
// with no listener to serve it on, or SecureServing's.
func (o *Options) Validate() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	if o.LogFormat != LogFormatJSON && o.LogFormat != LogFormatText {
		return fmt.Errorf("--log-format %q: want json or text", o.LogFormat)
	}
	if o.Profiling && o.HealthAddress == "" && o.MetricsAddress == "" && !o.secure() {
		return errors.New("--profiling needs --health-address, --metrics-bind-address or --secure-port to serve /debug/pprof on")
	}
	if o.SecureServing != nil {
		return o.SecureServing.Validate()
	}
	return nil
}

// NewLogger is the logger o describes, writing to w. Errors: Validate's.
func (o *Options) NewLogger(w io.Writer) (*slog.Logger, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.LogLevel))
	handlerOpts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == LogFormatText {
		return slog.New(slog.NewTextHandler(w, handlerOpts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, handlerOpts)), nil
}

// Logger validates o, makes its logger (to stderr) slog's default and returns it. On
// invalid options it prints the reason prefixed with component and exits with code 2, as
// a flag parse error does: it is meant for a main right after flag.Parse.
func (o *Options) Logger(component string) *slog.Logger {
	logger, err := o.NewLogger(os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", component, err)
		os.Exit(2)
	}
	slog.SetDefault(logger)
	return logger
}

// NewRegistry is a Prometheus registry holding cs and the Go runtime and process
// collectors every service exposes (go_*, process_*).
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// Addresses are where Start serves: the bound address of each listener, nil for one
// not served.
type Addresses struct {
	// Health is HealthAddress's plain-HTTP listener.
	Health net.Addr
	// Metrics is MetricsAddress's plain-HTTP listener.
	Metrics net.Addr
	// Secure is SecureServing's HTTPS listener.
	Secure net.Addr
}

// Start listens now, so a taken port fails the start, and serves the endpoints of Serve
// until ctx ends: /metrics from gatherer (nil = none), /debug/pprof with Profiling, and
// opts (WithReadiness, WithLiveness). They are served over plain HTTP on HealthAddress
// (the probes only, when MetricsAddress takes /metrics and /debug/pprof), and over
// HTTPS on SecureServing's port when set, there only to callers the apiserver (reached
// with WithDelegatedAuth's client) authenticates and authorizes. A serving error after
// the start is logged with slog's default logger. Errors: a listen failed, the secure
// port's certificate or CA could not be read, or it has no WithDelegatedAuth; nothing
// is served then.
func (o *Options) Start(ctx context.Context, gatherer prometheus.Gatherer, opts ...Option) (Addresses, error) {
	all := opts
	if o.Profiling {
		all = append(append([]Option(nil), opts...), WithProfiling())
	}
	var addrs Addresses
	plain := []*plainListener{{flag: "--health-address", address: o.HealthAddress, bound: &addrs.Health, handler: Handler(gatherer, all...)}}
	if o.MetricsAddress != "" {
		plain = []*plainListener{
			{flag: "--health-address", address: o.HealthAddress, bound: &addrs.Health, handler: Handler(nil, opts...)},
			{flag: "--metrics-bind-address", address: o.MetricsAddress, bound: &addrs.Metrics, handler: Handler(gatherer, all...)},
		}
	}
	closeAll := func() {
		for _, p := range plain {
			if p.l != nil {
				p.l.Close()
			}
		}
	}
	for _, p := range plain {
		if err := p.listen(); err != nil {
			closeAll()
			return Addresses{}, err
		}
	}
	if o.secure() {
		addr, err := o.SecureServing.start(ctx, newEndpoints(all).delegation, Handler(gatherer, all...))
		if err != nil {
			closeAll()
			return Addresses{}, err
		}
		addrs.Secure = addr
	}
	for _, p := range plain {
		p.serve(ctx)
	}
	return addrs, nil
}

// plainListener is one of Start's plain-HTTP listeners.
type plainListener struct {
	flag, address string // "" serves none
	bound         *net.Addr
	handler       http.Handler
	l             net.Listener
}

// listen binds address, when set. Errors: the listen failed, named by flag.
func (p *plainListener) listen() error {
	if p.address == "" {
		return nil
	}
	l, err := net.Listen("tcp", p.address)
	if err != nil {
		return fmt.Errorf("%s: %w", p.flag, err)
	}
	p.l, *p.bound = l, l.Addr()
	return nil
}

// serve answers handler on the bound listener, if any, until ctx ends.
func (p *plainListener) serve(ctx context.Context) {
	if p.l == nil {
		return
	}
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := serve(ctx, srv, func() error { return srv.Serve(p.l) }); err != nil {
			slog.Error("health endpoints stopped", "address", p.l.Addr().String(), "err", err)
		}
	}()
}
