// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/scheduler"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	schedulerName := flag.String("scheduler-name", scheduler.DefaultSchedulerName, "schedule pods whose spec.schedulerName is this")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	// As kube-scheduler: replicas compete for the kube-system/kube-scheduler Lease and
	// only the holder binds.
	election := leaderelection.DefaultOptions("kube-scheduler")
	election.AddFlags(flag.CommandLine)
	// As kube-scheduler: /metrics and /debug/pprof only on the secure port 10259, to
	// callers the apiserver authenticates and authorizes; plain HTTP is off unless
	// --health-address asks for it.
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10259)
	srv.AddFlags(flag.CommandLine)
	// kube-scheduler's defaults: client-go's own (5 QPS, burst 10) cap binding at ~5 pods/s,
	// which is how long a backlog takes to drain after a fault.
	contentType := kubeclient.AddContentTypeFlag(flag.CommandLine)
	apiQPS := flag.Float64("kube-api-qps", 50, "requests per second to the apiserver (kube-scheduler's --kube-api-qps)")
	apiBurst := flag.Int("kube-api-burst", 100, "burst of requests to the apiserver (kube-scheduler's --kube-api-burst)")
	flag.Parse()

	logger := srv.Logger("scheduler")
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
	cfg.QPS, cfg.Burst = float32(*apiQPS), *apiBurst
	kubeclient.SetContentType(cfg, *contentType)
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "scheduler"})
	if err != nil {
		fail("tracing", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("building clientset", err)
	}
	natsTLS, err := pki.NATSClientTLS(cfg, *natsURL, *natsCAFile, *natsCertFile, *natsKeyFile)
	if err != nil {
		fail("NATS client TLS", err)
	}
	// Toward NATS it is its client certificate's user; it publishes under that name.
	var natsUser string
	if natsTLS != nil {
		if natsUser, err = pki.NATSUser(natsTLS); err != nil {
			fail("NATS client certificate", err)
		}
	}
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: *schedulerName, User: natsUser, NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		fail("event recorder", err)
	}
	// Every exit from here on, a leader's on a lost Lease included, first delivers the
	// events recorded so far.
	flushEvents := recorder.Start()
	defer flushEvents()
	failAfterEvents := func(msg string, err error) { flushEvents(); fail(msg, err) }
	sched, err := scheduler.New(scheduler.Config{Client: client, SchedulerName: *schedulerName, Recorder: recorder, TracerProvider: tp})
	if err != nil {
		failAfterEvents("building scheduler", err)
	}
	elector := leaderelection.New(client, election, "")
	if _, err := srv.Start(ctx, serving.NewRegistry(sched.Metrics(), recorder.Metrics()), serving.WithLiveness(elector.Check), serving.WithDelegatedAuth(client, cfg)); err != nil {
		failAfterEvents("health endpoints", err)
	}
	// A leader that lost its Lease exits (ErrLeaderElectionLost) so it never binds beside
	// the next one.
	if err := elector.Run(ctx, func(ctx context.Context) {
		if err := sched.Run(ctx); err != nil && ctx.Err() == nil {
			failAfterEvents("scheduler stopped", err)
		}
	}); err != nil {
		failAfterEvents("scheduler stopped", err)
	}
}
