// Package app is the scheduler's command, as kube's cmd/kube-scheduler/app: Options
// (the flags) → Config (the built client, recorder, tracer provider and endpoints) →
// Run. services/cmd/scheduler parses the flags and calls Options.Run; the all-in-one
// builds a Config itself, from its in-process identities, and calls Config.Run.
package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/scheduler"
)

// Options are the scheduler's flags (kube's cmd/kube-scheduler/app/options.Options).
type Options struct {
	// Client is --kubeconfig (the scheduler's identity; "" means the in-cluster
	// configuration), --kube-api-content-type, --kube-api-qps and --kube-api-burst.
	Client componentbase.ClientOptions
	// NATS is --nats-url and the mutual TLS toward it, where Events go.
	NATS componentbase.NATSOptions
	// SchedulerName is --scheduler-name: the spec.schedulerName of the pods scheduled,
	// and the component the Events are reported by.
	SchedulerName string
	// LeaderElection is --leader-elect*: replicas compete for the Lease
	// kube-system/kube-scheduler, and only the holder binds.
	LeaderElection leaderelection.Options
	// Serving is --log-level, --log-format, the plain-HTTP --health-address and
	// --metrics-bind-address, --profiling, and the secure port (--secure-port 10259 and
	// its TLS and delegated-auth flags).
	Serving *serving.Options
}

// NewOptions are kube-scheduler's defaults: 50 QPS with bursts of 100 (client-go's own
// 5 QPS, burst 10, cap binding at ~5 pods/s, which is how long a backlog takes to drain
// after a fault), protobuf, scheduler name default-scheduler, leader election on, and
// /metrics and /debug/pprof only on the secure port 10259, to callers the apiserver
// authenticates and authorizes (plain HTTP off unless --health-address asks for it).
func NewOptions() *Options {
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10259)
	return &Options{
		Client:         componentbase.NewClientOptions(50, 100),
		SchedulerName:  scheduler.DefaultSchedulerName,
		LeaderElection: leaderelection.DefaultOptions("kube-scheduler"),
		Serving:        srv,
	}
}

// AddFlags registers o's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Client.AddFlags(fs, "path to a kubeconfig; empty means in-cluster config")
	fs.StringVar(&o.SchedulerName, "scheduler-name", o.SchedulerName, "schedule pods whose spec.schedulerName is this")
	o.NATS.AddFlags(fs)
	o.LeaderElection.AddFlags(fs)
	o.Serving.AddFlags(fs)
}

// Validate reports the first unusable flag value as a componentbase.UsageError (exit
// code 2): Serving's (log level and format, --profiling without a listener, the secure
// port's).
func (o *Options) Validate() error {
	return componentbase.Usagef(o.Serving.Validate())
}

// Logger makes the logger Serving describes slog's default and returns it; on invalid
// Serving options it exits 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("scheduler") }

// Config builds what the scheduler runs with: its tracer provider, the clientset of
// --kubeconfig traced with it, and the event recorder (over NATS with --nats-url).
// Errors: a kubeconfig, TLS file or tracing configuration that does not load; nothing
// is left running then.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	tp, restConfig, client, err := o.Client.Clientset(ctx, "scheduler", "")
	if err != nil {
		return nil, err
	}
	recorder, err := o.NATS.Recorder(o.SchedulerName, restConfig, client)
	if err != nil {
		componentbase.ShutdownTracing(tp)
		return nil, fmt.Errorf("event recorder: %w", err)
	}
	election := o.LeaderElection
	return &Config{
		Client: client, RESTConfig: restConfig, SchedulerName: o.SchedulerName, Recorder: recorder, TracerProvider: tp,
		Serving: o.Serving, LeaderElection: &election,
	}, nil
}

// Run validates o, builds its Config and runs it until ctx ends (nil then) or the
// scheduler fails, then shuts the tracer provider down.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	c, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(c.TracerProvider)
	return c.Run(ctx)
}
