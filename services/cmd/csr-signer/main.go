// Command csr-signer runs skiff's CSR approver and signer against an apiserver: it
// auto-approves kubelet client requests that fit Kubernetes' rules (and, with
// --approve-kubelet-serving, kubelet serving requests for a node's own addresses) and
// issues certificates for approved requests with the cluster CA of a `skiff pki init`
// directory.
package main

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	pkiDir := flag.String("pki-dir", "", "directory made by skiff pki init, holding the cluster CA (ca.crt, ca.key); required")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the system:skiff:csr-signer identity; empty means <pki-dir>/csr-signer.kubeconfig")
	autoApprove := flag.Bool("auto-approve", true, "auto-approve kubelet client requests that fit Kubernetes' rules; false leaves every request to kubectl certificate approve|deny")
	approveServing := flag.Bool("approve-kubelet-serving", false, "with --auto-approve, also approve a kubelet's serving certificate request when its SANs are all the node's own name, Hostname/InternalDNS and InternalIP addresses and none is loopback, link-local, in --service-cluster-ip-range, a control-plane host (or an IP one resolves to) or another node's; false leaves them to a person, as kube-controller-manager does")
	serviceRange := flag.String("service-cluster-ip-range", csrsigner.DefaultServiceClusterIPRange.String(), "the Services' cluster IP range (the apiserver's --service-cluster-ip-range): no serving certificate is approved for its IPs")
	var controlPlaneHosts stringList
	flag.Var(&controlPlaneHosts, "control-plane-host", "DNS name or IP of the control plane never approved in a kubelet serving certificate, nor any IP the name resolves to (repeatable); adds to "+strings.Join(csrsigner.DefaultControlPlaneHosts(), ","))
	maxDuration := flag.Duration("max-duration", csrsigner.DefaultMaxDuration, "longest lifetime of an issued certificate; a request's spec.expirationSeconds may ask for less (not under 10m)")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS (default: the client certificate of --kubeconfig)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the key of --kubeconfig)")
	// As kube-controller-manager, whose job csr-signer does: /metrics and /debug/pprof
	// only on the secure port 10260, to callers the apiserver authenticates and
	// authorizes; plain HTTP is off unless --health-address asks for it.
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10260)
	srv.AddFlags(flag.CommandLine)
	flag.Parse()

	logger := srv.Logger("csr-signer")
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
	serviceCIDR, err := netip.ParsePrefix(*serviceRange)
	if err != nil {
		logger.Error("--service-cluster-ip-range", "err", err)
		os.Exit(2)
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
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "csr-signer", User: natsUser, NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		fail("event recorder", err)
	}
	go func() { _ = recorder.Run(ctx) }()
	controller, err := csrsigner.New(csrsigner.Config{Client: client, CA: ca, AutoApprove: *autoApprove,
		ApproveKubeletServing: *approveServing, ServiceClusterIPRange: serviceCIDR, ControlPlaneHosts: controlPlaneHosts,
		MaxDuration: *maxDuration, Logger: logger, Recorder: recorder})
	if err != nil {
		fail("building csr-signer", err)
	}

	if _, err := srv.Start(ctx, serving.NewRegistry(controller.Metrics(), recorder.Metrics()), serving.WithReadiness(controller.Ready), serving.WithDelegatedAuth(client, cfg)); err != nil {
		fail("health endpoints", err)
	}
	if err := controller.Run(ctx); err != nil && ctx.Err() == nil {
		fail("csr-signer stopped", err)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
