// Command csr-signer runs skiff's CSR approver and signer against an apiserver: it
// auto-approves kubelet requests that fit Kubernetes' rules and issues certificates for
// approved requests with the cluster CA of a `skiff pki init` directory.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/events"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	pkiDir := flag.String("pki-dir", "", "directory made by skiff pki init, holding the cluster CA (ca.crt, ca.key); required")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the system:skiff:csr-signer identity; empty means <pki-dir>/csr-signer.kubeconfig")
	autoApprove := flag.Bool("auto-approve", true, "auto-approve kubelet client and serving requests that fit Kubernetes' rules; false leaves every request to kubectl certificate approve|deny")
	maxDuration := flag.Duration("max-duration", csrsigner.DefaultMaxDuration, "longest lifetime of an issued certificate; a request's spec.expirationSeconds may ask for less (not under 10m)")
	healthAddress := flag.String("health-address", ":10260", "where /healthz, /livez, /readyz and /metrics are served (\"\" = off)")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: <pki-dir>/ca.crt)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: <pki-dir>/csr-signer.crt)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: <pki-dir>/csr-signer.key)")
	profiling := flag.Bool("profiling", false, "serve Go's /debug/pprof beside /healthz and /metrics")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	fail := func(msg string, err error) {
		logger.Error(msg, "err", err)
		os.Exit(1)
	}
	if *pkiDir == "" {
		logger.Error("--pki-dir is required")
		os.Exit(2)
	}
	if *kubeconfig == "" {
		*kubeconfig = filepath.Join(*pkiDir, pki.CSRSigner.Name+".kubeconfig")
	}

	ca, err := pki.LoadCA(*pkiDir)
	if err != nil {
		fail("loading the cluster CA", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("loading kubeconfig", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "csr-signer"})
	if err != nil {
		fail("tracing", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("building clientset", err)
	}
	var natsTLS *tls.Config
	if *natsURL != "" {
		defCert, defKey := pki.KeyPairFiles(*pkiDir, pki.CSRSigner.Name)
		if natsTLS, err = events.ClientTLSFromFiles(orDefault(*natsCAFile, filepath.Join(*pkiDir, pki.CACertFile)),
			orDefault(*natsCertFile, defCert), orDefault(*natsKeyFile, defKey)); err != nil {
			fail("NATS client TLS", err)
		}
	}
	recorder, err := events.New(events.Config{Component: "csr-signer", NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		fail("event recorder", err)
	}
	go func() { _ = recorder.Run(ctx) }()
	controller, err := csrsigner.New(csrsigner.Config{Client: client, CA: ca, AutoApprove: *autoApprove, MaxDuration: *maxDuration, Logger: logger, Recorder: recorder})
	if err != nil {
		fail("building csr-signer", err)
	}

	if *healthAddress != "" {
		l, err := net.Listen("tcp", *healthAddress)
		if err != nil {
			fail("health endpoints", err)
		}
		registry := prometheus.NewRegistry()
		registry.MustRegister(controller.Metrics(), recorder.Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		go func() {
			if err := serving.Serve(ctx, l, controller.Ready, registry, profilingOption(*profiling)...); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	if err := controller.Run(ctx); err != nil && ctx.Err() == nil {
		fail("csr-signer stopped", err)
	}
}

// orDefault is value, or def when value is "".
func orDefault(value, def string) string {
	if value == "" {
		return def
	}
	return value
}

// profilingOption is serving's option for --profiling.
func profilingOption(on bool) []serving.Option {
	if on {
		return []serving.Option{serving.WithProfiling()}
	}
	return nil
}
