// Command controller-manager runs skiff's kube-controller-manager against an apiserver:
// node lifecycle and taint eviction, node IPAM, pod garbage collection, the workload and
// endpoint controllers, namespace deletion, default ServiceAccounts, kube-root-ca.crt and
// ClusterRole aggregation, in whichever replica holds the kube-system/kube-controller-manager Lease.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/controllermanager"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster config")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	rootCAFile := flag.String("root-ca-file", "", "PEM bundle published in every namespace as the ConfigMap kube-root-ca.crt (default: the CA of --kubeconfig)")
	options := controllermanager.DefaultOptions()
	options.AddFlags(flag.CommandLine)
	election := leaderelection.DefaultOptions(controllermanager.LeaseName)
	election.AddFlags(flag.CommandLine)
	// As kube-controller-manager: /metrics and /debug/pprof only on the secure port
	// 10257, to callers the apiserver authenticates and authorizes; plain HTTP is off
	// unless --health-address asks for it.
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10257)
	srv.AddFlags(flag.CommandLine)
	contentType := kubeclient.AddContentTypeFlag(flag.CommandLine)
	flag.Parse()

	logger := srv.Logger("controller-manager")
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
	kubeclient.SetContentType(cfg, *contentType)
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
	natsTLS, err := pki.NATSClientTLS(cfg, *natsURL, *natsCAFile, *natsCertFile, *natsKeyFile)
	if err != nil {
		fail("NATS client TLS", err)
	}
	rootCA, err := rootCABundle(*rootCAFile, cfg)
	if err != nil {
		fail("root CA", err)
	}
	// Each controller reports its events under its own kube component name
	// (Events.ForComponent) through this one recorder.
	// Toward NATS it is its client certificate's user; it publishes under that name.
	var natsUser string
	if natsTLS != nil {
		if natsUser, err = pki.NATSUser(natsTLS); err != nil {
			fail("NATS client certificate", err)
		}
	}
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "kube-controller-manager", User: natsUser, NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		fail("event recorder", err)
	}
	// Every exit from here on, a leader's on a lost Lease included, first delivers the
	// events recorded so far.
	flushEvents := recorder.Start()
	defer flushEvents()
	failAfterEvents := func(msg string, err error) { flushEvents(); fail(msg, err) }

	registry := serving.NewRegistry(recorder.Metrics())
	controllermanager.RegisterWorkqueueMetrics(registry)
	cm, err := controllermanager.New(controllermanager.Config{
		Client: client, RESTConfig: cfg, RootCA: rootCA, Events: recorder, Options: options, LeaderElection: election,
		Registerer: registry, TracerProvider: tp,
	})
	if err != nil {
		failAfterEvents("controller manager", err)
	}
	if _, err := srv.Start(ctx, registry, serving.WithLiveness(cm.Healthz), serving.WithDelegatedAuth(client, cfg)); err != nil {
		failAfterEvents("health endpoints", err)
	}
	if err := cm.Run(ctx); err != nil {
		failAfterEvents("controller manager stopped", err)
	}
}

// rootCABundle is the PEM bundle root-ca-cert-publisher publishes: file, else the CA
// the kubeconfig trusts (kube's --root-ca-file default). Errors: an unreadable file, or
// neither.
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
