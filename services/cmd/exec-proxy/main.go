// Command exec-proxy runs skiff's exec-proxy: it carries kubectl exec, attach,
// port-forward and logs from the apiserver to the kubelet on the pod's node.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of exec-proxy's identity (system:skiff:exec-proxy), to read pods and nodes; empty means in-cluster config")
	bindAddress := flag.String("bind-address", "0.0.0.0", "address to listen on")
	port := flag.Int("port", execproxy.DefaultPort, "HTTPS port the apiserver proxies to")
	certFile := flag.String("tls-cert-file", "", "serving certificate (pki: exec-proxy-serving.crt)")
	keyFile := flag.String("tls-private-key-file", "", "serving key (pki: exec-proxy-serving.key)")
	caFile := flag.String("client-ca-file", "", "cluster CA: verifies the apiserver's front-proxy-client certificate and the kubelets' serving certificates")
	kubeletCert := flag.String("kubelet-client-certificate", "", "client certificate toward kubelets (pki: exec-proxy.crt)")
	kubeletKey := flag.String("kubelet-client-key", "", "client key toward kubelets (pki: exec-proxy.key)")
	healthAddress := flag.String("health-address", "", "where /healthz, /livez, /readyz and /metrics are served over plain HTTP (\"\" = off; /healthz is also on the HTTPS port)")
	profiling := flag.Bool("profiling", false, "serve Go's /debug/pprof beside /healthz and /metrics")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	if err := run(logger, *kubeconfig, net.JoinHostPort(*bindAddress, strconv.Itoa(*port)), *certFile, *keyFile, *caFile, *kubeletCert, *kubeletKey, *healthAddress, profilingOption(*profiling)); err != nil {
		logger.Error("exec-proxy stopped", "err", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger, kubeconfig, addr, certFile, keyFile, caFile, kubeletCertFile, kubeletKeyFile, healthAddress string, healthOptions []serving.Option) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "exec-proxy"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("--client-ca-file %s holds no certificate", caFile)
	}
	servingCert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	kubeletCert, err := tls.LoadX509KeyPair(kubeletCertFile, kubeletKeyFile)
	if err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	p, err := execproxy.New(execproxy.Config{Client: client, KubeletTLS: execproxy.KubeletClientTLS(kubeletCert, ca), Logger: logger, TracerProvider: tp})
	if err != nil {
		return err
	}
	if healthAddress != "" {
		hl, err := net.Listen("tcp", healthAddress)
		if err != nil {
			return fmt.Errorf("health endpoints: %w", err)
		}
		registry := prometheus.NewRegistry()
		registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		go func() {
			if err := serving.Serve(ctx, hl, nil, registry, healthOptions...); err != nil {
				logger.Error("health endpoints stopped", "err", err)
			}
		}()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	logger.Info("serving exec-proxy", "addr", l.Addr().String())
	return p.Serve(ctx, l, &tls.Config{Certificates: []tls.Certificate{servingCert}, ClientCAs: ca})
}

// profilingOption is serving's option for --profiling.
func profilingOption(on bool) []serving.Option {
	if on {
		return []serving.Option{serving.WithProfiling()}
	}
	return nil
}
