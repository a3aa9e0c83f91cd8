// Package app is the proxy's startup, as kube's cmd/kube-proxy/app: Options (every
// flag of the proxy command) → Config (the built client and nftables) → Run. The proxy
// command parses flags into Options and runs them; the all-in-one builds a Config
// directly from its own system:kube-proxy client.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/proxy"
)

// Options are the proxy command's flags, as kube-proxy's; each field is the flag named
// in its comment.
type Options struct {
	// Client is --kubeconfig (the system:kube-proxy identity, ClusterRole
	// system:node-proxier; required unless Cleanup), --kube-api-content-type,
	// --kube-api-qps and --kube-api-burst (default client-go's: 5 and 10).
	Client componentbase.ClientOptions
	// HostnameOverride is this node's name, for the Local traffic policies
	// (--hostname-override); "" means the host name.
	HostnameOverride string
	// Table is the nftables table (family ip) the proxy owns (--table).
	Table string
	// MinSyncPeriod and SyncPeriod are the least and the longest time between two rule
	// syncs (--min-sync-period, default 1 s; --sync-period, default 30 s).
	MinSyncPeriod, SyncPeriod time.Duration
	// Cleanup deletes Table and exits, as `kube-proxy --cleanup` (--cleanup).
	Cleanup bool
	// CleanupOnExit deletes Table when the proxy stops (--cleanup-on-exit).
	CleanupOnExit bool
	// Serving are the logs and kube-proxy's listeners: the probes on every interface
	// at 10256 (--health-address), /metrics and /debug/pprof on loopback at 10249
	// (--metrics-bind-address), neither authenticated.
	Serving *serving.Options
}

// NewOptions returns the proxy command's defaults.
func NewOptions() *Options {
	srv := serving.NewOptions(":10256")
	srv.MetricsAddress = "127.0.0.1:10249"
	return &Options{
		Client:        componentbase.NewClientOptions(0, 0),
		Table:         proxy.DefaultTable,
		MinSyncPeriod: time.Second,
		SyncPeriod:    30 * time.Second,
		Serving:       srv,
	}
}

// AddFlags registers the proxy command's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Client.AddFlags(fs, "kubeconfig of the system:kube-proxy identity (ClusterRole system:node-proxier); required unless --cleanup")
	fs.StringVar(&o.HostnameOverride, "hostname-override", o.HostnameOverride, "this node's name, for the Local traffic policies (default: the host name)")
	fs.StringVar(&o.Table, "table", o.Table, "the nftables table (family ip) the proxy owns")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", o.MinSyncPeriod, "least time between two rule syncs")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "longest time between two rule syncs")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "delete the proxy's table and exit")
	fs.BoolVar(&o.CleanupOnExit, "cleanup-on-exit", o.CleanupOnExit, "delete the table when stopped (kube-proxy keeps its rules across restarts)")
	o.Serving.AddFlags(fs)
}

// Validate reports the first flag value the proxy refuses, as a
// componentbase.UsageError (exit 2): the logging and serving options, or no
// --kubeconfig without --cleanup.
func (o *Options) Validate() error {
	if err := o.Serving.Validate(); err != nil {
		return componentbase.Usagef(err)
	}
	if !o.Cleanup && o.Client.Kubeconfig == "" {
		return componentbase.Usagef(errors.New("--kubeconfig is required"))
	}
	return nil
}

// Logger validates the logging flags, makes their logger slog's default and returns
// it; invalid ones exit 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("proxy") }

// Run runs the proxy until ctx ends, or with Cleanup deletes its table and returns:
// Validate, Config, Config.Run, then the tracer provider Config made is shut down.
// Errors: Validate's (UsageError), Config's and Run's.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Cleanup {
		return o.cleanup(ctx)
	}
	cfg, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(cfg.TracerProvider)
	return cfg.Run(ctx)
}

// cleanup deletes the proxy's table (a missing one is no error), as
// `kube-proxy --cleanup`. Errors: no nftables here (proxy.ErrNoDataplane), or the
// deletion failed.
func (o *Options) cleanup(ctx context.Context) error {
	nft, err := proxy.NewNFTables(o.Table)
	if err != nil {
		return fmt.Errorf("no proxy on this node: %w", err)
	}
	if err := proxy.Cleanup(ctx, nft); err != nil {
		return fmt.Errorf("deleting table %s: %w", o.Table, err)
	}
	slog.Info("deleted the proxy's table", "table", "ip "+o.Table)
	return nil
}

// Config is a proxy ready to run, every piece built (kube-proxy's ProxyServer before
// Run). Options.Config builds it from flags; the all-in-one fills it directly.
type Config struct {
	// Proxy is the proxy's own configuration, given to proxy.New: Client (required),
	// NodeName, Table, NFTables (nil: opened by proxy.New), the sync periods,
	// CleanupOnExit and Logger.
	Proxy proxy.Config
	// Serving, when set, serves the probes (readiness: the last sync succeeded) and
	// /metrics (the proxy's sync metrics, Go's and the process's) while Run runs; nil
	// serves none.
	Serving *serving.Options
	// TracerProvider is the one Proxy.Client's requests are traced with, kept so that
	// whoever made it can shut it down after Run (Options.Run does); Run neither uses
	// nor shuts it down. nil: none.
	TracerProvider trace.TracerProvider
}

// Config builds the proxy of o: the table's nftables (proxy.NewNFTables), the node
// name, and the client from --kubeconfig, traced by a tracer provider of its own
// (OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set). Errors name the step that failed:
// without nftables here it is proxy.ErrNoDataplane, wrapped.
func (o *Options) Config(ctx context.Context) (_ *Config, err error) {
	nft, err := proxy.NewNFTables(o.Table)
	if err != nil {
		return nil, fmt.Errorf("no proxy on this node: %w", err)
	}
	nodeName := o.HostnameOverride
	if nodeName == "" {
		if nodeName, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("node name: %w", err)
		}
	}
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "proxy"})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		if err != nil {
			componentbase.ShutdownTracing(tp)
		}
	}()
	restConfig, err := o.Client.RESTConfig(tp, "skiff-proxy")
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("building clientset: %w", err)
	}
	return &Config{
		Proxy: proxy.Config{Client: client, NodeName: nodeName, Table: o.Table, NFTables: nft,
			MinSyncPeriod: o.MinSyncPeriod, SyncPeriod: o.SyncPeriod, CleanupOnExit: o.CleanupOnExit, Logger: slog.Default()},
		Serving:        o.Serving,
		TracerProvider: tp,
	}, nil
}

// Run builds the proxy (proxy.New), serves its endpoints when Serving is set, and keeps
// the node's rules in step with Services and EndpointSlices until ctx ends (nil).
// Errors: a missing Client, no nftables here (errors.Is proxy.ErrNoDataplane: the
// all-in-one runs without a proxy then), a port that cannot be listened on, the proxy
// stopping on its own; each wrapped with what failed.
func (c *Config) Run(ctx context.Context) error {
	p, err := proxy.New(c.Proxy)
	if err != nil {
		return fmt.Errorf("building the proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx) // stops the endpoints when Run returns
	defer cancel()
	if c.Serving != nil {
		if _, err := c.Serving.Start(ctx, serving.NewRegistry(p.Metrics()), serving.WithReadiness(p.Ready)); err != nil {
			return fmt.Errorf("health endpoints: %w", err)
		}
	}
	if err := p.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("proxy stopped: %w", err)
	}
	return nil
}
