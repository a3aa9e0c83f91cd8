package app

import (
	"context"
	"fmt"
	"log/slog"

	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet/hollow"
)

// runHollowNodes runs --hollow-nodes hollow nodes (kubemark's hollow kubelets, package
// hollow) until ctx ends: the health endpoints of o.Serving, each node joining through
// --bootstrap-kubeconfig with its state under <root-dir>/<name>, traced when OTLP is
// set up, its events to --nats-url verified with --nats-ca-file (else --client-ca-file,
// else the bootstrap kubeconfig's CA) and each node's own client certificate. Errors:
// a port, the NATS CA, tracing, or the nodes failing.
func (o *Options) runHollowNodes(ctx context.Context) error {
	logger := slog.Default()
	if _, err := o.Serving.Start(ctx, serving.NewRegistry()); err != nil {
		return fmt.Errorf("health endpoints: %w", err)
	}
	cfg := hollow.Config{Nodes: o.HollowNodes, NamePrefix: o.HollowNamePrefix, BootstrapKubeconfig: o.BootstrapKubeconfig,
		RootDir: o.RootDir, NodeIP: o.NodeIP, GenericPLEG: !o.EventedPLEG, NATSURL: o.NATS.URL, Logger: logger}
	if o.NATS.URL != "" {
		// Each node presents its own client certificate (--nats-cert-file does not
		// apply); NATS is verified with --nats-ca-file, else the cluster's CA.
		var err error
		if cfg.NATSCA, err = pki.ReadCA(o.BootstrapKubeconfig, o.NATS.CAFile, o.ClientCAFile); err != nil {
			return fmt.Errorf("NATS CA: %w", err)
		}
	}
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "kubelet"})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.TracerProvider = tp
	if err := hollow.Run(ctx, cfg); err != nil {
		return fmt.Errorf("hollow nodes failed: %w", err)
	}
	return nil
}
