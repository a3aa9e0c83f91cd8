// Command runtime serves one of skiff's built-in CRI runtimes (process or sim) on a unix
// socket, for a kubelet running as its own process: the kubelet image of the compose
// stack starts it beside the kubelet, as a node runs containerd beside its kubelet.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.opentelemetry.io/otel"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	name := flag.String("runtime", "process", "built-in CRI runtime: process (real processes) or sim (simulated containers)")
	socket := flag.String("listen", "/run/skiff/cri.sock", "unix socket the CRI gRPC server listens on")
	rootDir := flag.String("root-dir", "/var/lib/skiff/runtime", "process runtime state: sandboxes, container root directories")
	srv := serving.NewOptions("")
	srv.AddFlags(flag.CommandLine)
	flag.Parse()

	logger := srv.Logger("runtime")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := srv.Start(ctx, serving.NewRegistry()); err != nil {
		logger.Error("health endpoints", "err", err)
		os.Exit(1)
	}
	// The CRI server traces with the global provider: OTLP export when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, a no-op otherwise.
	hostname, _ := os.Hostname()
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "runtime", NodeName: hostname})
	if err != nil {
		logger.Error("tracing", "err", err)
		os.Exit(1)
	}
	otel.SetTracerProvider(tp)
	defer func() { _ = tp.Shutdown(context.Background()) }()
	if err := run(ctx, *name, *socket, *rootDir); err != nil {
		logger.Error("runtime stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, name, socket, rootDir string) error {
	switch name {
	case "process":
		rt, err := process.New(rootDir)
		if err != nil {
			return err
		}
		defer rt.Close()
		slog.Info("serving CRI", "runtime", name, "socket", socket)
		return cri.Serve(ctx, socket, rt, rt)
	case "sim":
		rt := sim.New()
		defer rt.Close()
		slog.Info("serving CRI", "runtime", name, "socket", socket)
		return cri.Serve(ctx, socket, rt, rt)
	default:
		return fmt.Errorf("unknown runtime %q: want process or sim", name)
	}
}
