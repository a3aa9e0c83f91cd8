// Package app is the startup of the runtime command, which serves one of skiff's
// built-in CRI runtimes (process or sim) on a unix socket for a kubelet running as its
// own process, as a node runs containerd beside its kubelet: Options (every flag) →
// Config (the built runtime) → Run, the shape of kube's cmd/<component>/app.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

// The built-in runtimes --runtime names.
const (
	// RuntimeProcess runs containers as real processes (package process).
	RuntimeProcess = "process"
	// RuntimeSim simulates containers (package sim).
	RuntimeSim = "sim"
)

// Options are the runtime command's flags; each field is the flag named in its
// comment.
type Options struct {
	// Runtime is RuntimeProcess or RuntimeSim (--runtime).
	Runtime string
	// Listen is the unix socket the CRI gRPC server listens on (--listen).
	Listen string
	// RootDir holds the process runtime's state: sandboxes, container root directories
	// (--root-dir).
	RootDir string
	// Serving are the logs and the plain-HTTP health and metrics endpoints, off by
	// default.
	Serving *serving.Options
}

// NewOptions returns the runtime command's defaults.
func NewOptions() *Options {
	return &Options{
		Runtime: RuntimeProcess,
		Listen:  "/run/skiff/cri.sock",
		RootDir: "/var/lib/skiff/runtime",
		Serving: serving.NewOptions(""),
	}
}

// AddFlags registers the runtime command's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Runtime, "runtime", o.Runtime, "built-in CRI runtime: process (real processes) or sim (simulated containers)")
	fs.StringVar(&o.Listen, "listen", o.Listen, "unix socket the CRI gRPC server listens on")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "process runtime state: sandboxes, container root directories")
	o.Serving.AddFlags(fs)
}

// Validate reports the first flag value the command refuses, as a
// componentbase.UsageError (exit 2): the logging and serving options, or a --runtime
// other than process and sim.
func (o *Options) Validate() error {
	if err := o.Serving.Validate(); err != nil {
		return componentbase.Usagef(err)
	}
	if o.Runtime != RuntimeProcess && o.Runtime != RuntimeSim {
		return componentbase.Usagef(fmt.Errorf("unknown runtime %q: want process or sim", o.Runtime))
	}
	return nil
}

// Logger validates the logging flags, makes their logger slog's default and returns
// it; invalid ones exit 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("runtime") }

// Run serves the runtime until ctx ends: Validate, Config, Config.Run, then the runtime
// (its containers stopped) and the tracer provider Config made are closed. Errors:
// Validate's (UsageError), Config's and Run's.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(cfg.TracerProvider)
	defer cfg.Runtime.Close()
	return cfg.Run(ctx)
}

// Config builds the runtime of o: a tracer provider for this host (OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set), installed as the global one, which cri.Serve
// traces with; then the process runtime over --root-dir, or the sim runtime. Errors:
// tracing's, an unknown runtime, or the process runtime's state directory.
func (o *Options) Config(ctx context.Context) (_ *Config, err error) {
	hostname, _ := os.Hostname()
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "runtime", NodeName: hostname})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	otel.SetTracerProvider(tp)
	var rt Runtime
	switch o.Runtime {
	case RuntimeProcess:
		if rt, err = process.New(o.RootDir); err != nil {
			componentbase.ShutdownTracing(tp)
			return nil, fmt.Errorf("process runtime: %w", err)
		}
	case RuntimeSim:
		rt = sim.New()
	default:
		componentbase.ShutdownTracing(tp)
		return nil, componentbase.Usagef(fmt.Errorf("unknown runtime %q: want process or sim", o.Runtime))
	}
	return &Config{Name: o.Runtime, Runtime: rt, Socket: o.Listen, Serving: o.Serving, TracerProvider: tp}, nil
}

// Runtime is a built-in CRI runtime: its runtime and image services, and Close, which
// stops its containers and releases its state.
type Runtime interface {
	runtimeapi.RuntimeServiceServer
	runtimeapi.ImageServiceServer
	Close()
}

// Config is a runtime ready to serve. Options.Config builds it from flags; the
// all-in-one fills it with the runtime it made for its kubelet.
type Config struct {
	// Name names the runtime in the log ("process", "sim").
	Name string
	// Runtime is what is served (process.Runtime, sim.Runtime); required. Run does not
	// close it: whoever made it does, after Run (Options.Run does).
	Runtime Runtime
	// Socket is the unix socket path the CRI gRPC server listens on; required.
	Socket string
	// Serving, when set, serves the plain-HTTP health and metrics (Go's and the
	// process's) endpoints while Run runs; nil serves none.
	Serving *serving.Options
	// TracerProvider is the one Options.Config installed globally (cri.Serve traces
	// with the global provider), kept so that Options.Run shuts it down after Run; Run
	// neither uses nor shuts it down. nil: none.
	TracerProvider trace.TracerProvider
}

// Run serves Runtime on Socket (cri.Serve) until ctx ends (nil), with the Serving
// endpoints. Errors: no Runtime or Socket, a port or the socket that cannot be
// listened on, or serving failing.
func (c *Config) Run(ctx context.Context) error {
	if c.Runtime == nil || c.Socket == "" {
		return errors.New("runtime: Config.Runtime and Config.Socket are required")
	}
	ctx, cancel := context.WithCancel(ctx) // stops the endpoints when Run returns
	defer cancel()
	if c.Serving != nil {
		if _, err := c.Serving.Start(ctx, serving.NewRegistry()); err != nil {
			return fmt.Errorf("health endpoints: %w", err)
		}
	}
	slog.Info("serving CRI", "runtime", c.Name, "socket", c.Socket)
	return cri.Serve(ctx, c.Socket, c.Runtime, c.Runtime)
}
