// Command controller-manager runs skiff's kube-controller-manager against an apiserver:
// node lifecycle and taint eviction, node IPAM, pod garbage collection and the workload
// controllers, in whichever replica holds the kube-system/kube-controller-manager Lease.
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

	"skiff.dev/services/controllermanager"
	"skiff.dev/services/internal/events"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	healthAddress := flag.String("health-address", ":10257", "where /healthz, /livez, /readyz and /metrics are served (\"\" = off)")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	options := controllermanager.DefaultOptions()
	options.AddFlags(flag.CommandLine)
	election := leaderelection.DefaultOptions(controllermanager.LeaseName)
	election.AddFlags(flag.CommandLine)
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	fail := func(msg string, err error) {
		logger.Error(msg, "err", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("loading kubeconfig", err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: the apiserver's own limits apply
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "controller-manager"})
	if err != nil {
		fail("tracing", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("building clientset", err)
	}
	natsTLS, err := events.ServiceClientTLS(cfg, *natsURL, *natsCAFile, *natsCertFile, *natsKeyFile)
	if err != nil {
		fail("NATS client TLS", err)
	}
	recorder, err := events.New(events.Config{Component: "controllermanager", NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		fail("event recorder", err)
	}
	go func() { _ = recorder.Run(ctx) }()

	registry := prometheus.NewRegistry()
	registry.MustRegister(recorder.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cm, err := controllermanager.New(controllermanager.Config{
		Client: client, Recorder: recorder, Options: options, LeaderElection: election,
		Registerer: registry, TracerProvider: tp,
	})
	if err != nil {
		fail("controller manager", err)
	}
	if *healthAddress != "" {
		l, err := net.Listen("tcp", *healthAddress)
		if err != nil {
			fail("health endpoints", err)
		}
		go func() {
			if err := serving.Serve(ctx, l, cm.Healthz, registry); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	if err := cm.Run(ctx); err != nil {
		fail("controller manager stopped", err)
	}
}
