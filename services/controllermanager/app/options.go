// Package app is the controller manager's command, as kube's
// cmd/kube-controller-manager/app: Options (the flags) → Config (the built client,
// recorder, tracer provider, root CA and endpoints) → Run. services/cmd/controller-manager
// parses the flags and calls Options.Run; the all-in-one builds a Config itself, from
// its in-process identities, and calls Config.Run.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"k8s.io/client-go/rest"

	"skiff.dev/services/controllermanager"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
)

// Options are the controller manager's flags (kube's
// cmd/kube-controller-manager/app/options.KubeControllerManagerOptions).
type Options struct {
	// Client is --kubeconfig (system:kube-controller-manager; "" means the in-cluster
	// configuration), --kube-api-content-type, --kube-api-qps and --kube-api-burst.
	Client componentbase.ClientOptions
	// NATS is --nats-url and the mutual TLS toward it, where Events go.
	NATS componentbase.NATSOptions
	// RootCAFile is --root-ca-file: the PEM bundle published in every namespace as the
	// ConfigMap kube-root-ca.crt; "" means the CA of the kubeconfig.
	RootCAFile string
	// ControllerManager are the controllers' flags (--controllers, --concurrent-*,
	// --node-*, --cluster-cidr, ...).
	ControllerManager controllermanager.Options
	// LeaderElection is --leader-elect*: replicas compete for the Lease
	// kube-system/kube-controller-manager, and only the holder runs controllers.
	LeaderElection leaderelection.Options
	// Serving is --log-level, --log-format, the plain-HTTP --health-address and
	// --metrics-bind-address, --profiling, and the secure port (--secure-port 10257 and
	// its TLS and delegated-auth flags).
	Serving *serving.Options
}

// NewOptions are kube-controller-manager's defaults: no client-side rate limit (QPS -1:
// the apiserver's own limits apply), protobuf, controllermanager.DefaultOptions,
// leader election on, and /metrics and /debug/pprof only on the secure port 10257, to
// callers the apiserver authenticates and authorizes (plain HTTP off unless
// --health-address asks for it).
func NewOptions() *Options {
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10257)
	return &Options{
		Client:            componentbase.NewClientOptions(-1, 0),
		ControllerManager: controllermanager.DefaultOptions(),
		LeaderElection:    leaderelection.DefaultOptions(controllermanager.LeaseName),
		Serving:           srv,
	}
}

// AddFlags registers o's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Client.AddFlags(fs, "path to a kubeconfig; empty means in-cluster config")
	o.NATS.AddFlags(fs)
	fs.StringVar(&o.RootCAFile, "root-ca-file", o.RootCAFile, "PEM bundle published in every namespace as the ConfigMap kube-root-ca.crt (default: the CA of --kubeconfig)")
	o.ControllerManager.AddFlags(fs)
	o.LeaderElection.AddFlags(fs)
	o.Serving.AddFlags(fs)
}

// Validate reports the first unusable flag value as a componentbase.UsageError (exit
// code 2): Serving's, or the controllers' (controllermanager.Options.Validate: an
// unknown controller in --controllers, a non-positive period, ...).
func (o *Options) Validate() error {
	if err := o.Serving.Validate(); err != nil {
		return componentbase.Usagef(err)
	}
	return componentbase.Usagef(o.ControllerManager.Validate())
}

// Logger makes the logger Serving describes slog's default and returns it; on invalid
// Serving options it exits 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("controller-manager") }

// Config builds what the controller manager runs with: its tracer provider, the
// clientset of --kubeconfig traced with it, the root CA bundle (rootCABundle) and the
// event recorder, which reports each controller's events under its own kube component
// name (Events.ForComponent). Errors: a kubeconfig, CA, TLS file or tracing
// configuration that does not load; nothing is left running then.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	tp, restConfig, client, err := o.Client.Clientset(ctx, "controller-manager", "")
	if err != nil {
		return nil, err
	}
	rootCA, err := rootCABundle(o.RootCAFile, restConfig)
	if err != nil {
		componentbase.ShutdownTracing(tp)
		return nil, fmt.Errorf("root CA: %w", err)
	}
	recorder, err := o.NATS.Recorder("kube-controller-manager", restConfig, client)
	if err != nil {
		componentbase.ShutdownTracing(tp)
		return nil, fmt.Errorf("event recorder: %w", err)
	}
	election := o.LeaderElection
	return &Config{
		Client: client, RESTConfig: restConfig, RootCA: rootCA, Recorder: recorder, TracerProvider: tp,
		ControllerManager: o.ControllerManager, Serving: o.Serving, LeaderElection: &election,
	}, nil
}

// Run validates o, builds its Config and runs it until ctx ends (nil then) or the
// controller manager fails, then shuts the tracer provider down.
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

// rootCABundle is the PEM bundle root-ca-cert-publisher publishes: file, else the CA
// cfg trusts (kube's --root-ca-file default). Errors: an unreadable file, or neither.
func rootCABundle(file string, cfg *rest.Config) ([]byte, error) {
	switch {
	case file != "":
		return os.ReadFile(file)
	case len(cfg.TLSClientConfig.CAData) > 0:
		return cfg.TLSClientConfig.CAData, nil
	case cfg.TLSClientConfig.CAFile != "":
		return os.ReadFile(cfg.TLSClientConfig.CAFile)
	}
	return nil, errors.New("no --root-ca-file and the kubeconfig names no CA")
}
