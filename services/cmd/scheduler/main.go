// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/events"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/scheduler"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	schedulerName := flag.String("scheduler-name", scheduler.DefaultSchedulerName, "schedule pods whose spec.schedulerName is this")
	healthAddress := flag.String("health-address", ":10259", "where /healthz, /livez, /readyz and /metrics are served (\"\" = off)")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	// As kube-scheduler: replicas compete for the kube-system/kube-scheduler Lease and
	// only the holder binds.
	election := leaderelection.DefaultOptions("kube-scheduler")
	election.AddFlags(flag.CommandLine)
	profiling := flag.Bool("profiling", false, "serve Go's /debug/pprof beside /healthz and /metrics")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logger.Error("loading kubeconfig", "err", err)
		os.Exit(1)
	}
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "scheduler"})
	if err != nil {
		logger.Error("tracing", "err", err)
		os.Exit(1)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error("building clientset", "err", err)
		os.Exit(1)
	}
	natsTLS, err := events.ServiceClientTLS(cfg, *natsURL, *natsCAFile, *natsCertFile, *natsKeyFile)
	if err != nil {
		logger.Error("NATS client TLS", "err", err)
		os.Exit(1)
	}
	recorder, err := events.New(events.Config{Component: *schedulerName, NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		logger.Error("event recorder", "err", err)
		os.Exit(1)
	}
	go func() { _ = recorder.Run(ctx) }()
	sched, err := scheduler.New(scheduler.Config{Client: client, SchedulerName: *schedulerName, Recorder: recorder, TracerProvider: tp})
	if err != nil {
		logger.Error("building scheduler", "err", err)
		os.Exit(1)
	}
	if *healthAddress != "" {
		l, err := net.Listen("tcp", *healthAddress)
		if err != nil {
			logger.Error("health endpoints", "err", err)
			os.Exit(1)
		}
		registry := prometheus.NewRegistry()
		registry.MustRegister(sched.Metrics(), recorder.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		go func() {
			if err := serving.Serve(ctx, l, nil, registry, profilingOption(*profiling)...); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	elector := leaderelection.New(client, election, "")
	if err := elector.Run(ctx, func(ctx context.Context) {
		if err := sched.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Error("scheduler stopped", "err", err)
			os.Exit(1)
		}
	}); err != nil {
		// A leader that lost its Lease exits so it never binds beside the next one.
		logger.Error("scheduler stopped", "err", err)
		os.Exit(1)
	}
}

// profilingOption is serving's option for --profiling.
func profilingOption(on bool) []serving.Option {
	if on {
		return []serving.Option{serving.WithProfiling()}
	}
	return nil
}
