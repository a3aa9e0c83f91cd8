// Command exec-proxy runs skiff's exec-proxy: it carries kubectl exec, attach,
// port-forward and logs from the apiserver to the kubelet on the pod's node.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/tunnel"
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
	// /healthz is also on the HTTPS port.
	srv := serving.NewOptions("")
	srv.AddFlags(flag.CommandLine)
	tunnelPort := flag.Int("tunnel-port", tunnel.DefaultPort, "gRPC port (mutual TLS, the serving certificate above) where kubelets open their node-initiated tunnels (kubelet --tunnel-server); a node with a tunnel is reached through it; 0 = none, every kubelet is dialed directly")
	flag.Parse()

	logger := srv.Logger("exec-proxy")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger, srv, *kubeconfig, net.JoinHostPort(*bindAddress, strconv.Itoa(*port)), tunnelAddress(*bindAddress, *tunnelPort), *certFile, *keyFile, *caFile, *kubeletCert, *kubeletKey); err != nil {
		logger.Error("exec-proxy stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, srv *serving.Options, kubeconfig, addr, tunnelAddr, certFile, keyFile, caFile, kubeletCertFile, kubeletKeyFile string) error {
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "exec-proxy"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	caPEM, err := pki.ReadCA("", caFile)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	servingTLS, err := pki.ServingTLS(certFile, keyFile, caPEM)
	if err != nil {
		return err
	}
	// The cluster CA verifies the kubelets' serving certificates too.
	kubeletTLS, err := pki.ReloadingClientTLS(caPEM, kubeletCertFile, kubeletKeyFile)
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
	cfgProxy := execproxy.Config{Client: client, KubeletTLS: kubeletTLS, Logger: logger, TracerProvider: tp}
	if tunnelAddr != "" {
		tl, err := net.Listen("tcp", tunnelAddr)
		if err != nil {
			return fmt.Errorf("tunnel port: %w", err)
		}
		tunnels := tunnel.NewServer(logger)
		cfgProxy.Tunnels = tunnels
		logger.Info("serving node tunnels", "addr", tl.Addr().String())
		tunnelCtx, stopTunnels := context.WithCancelCause(ctx)
		defer stopTunnels(nil)
		ctx = tunnelCtx
		go func() {
			if err := tunnels.Serve(ctx, tl, tunnel.ServerTLS(servingTLS.Certificates[0], servingTLS.ClientCAs)); err != nil {
				logger.Error("tunnel server stopped", "err", err)
				stopTunnels(err)
			}
		}()
	}
	p, err := execproxy.New(cfgProxy)
	if err != nil {
		return err
	}
	if _, err := srv.Start(ctx, serving.NewRegistry()); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	logger.Info("serving exec-proxy", "addr", l.Addr().String())
	return p.Serve(ctx, l, servingTLS)
}

// tunnelAddress is where the tunnel server listens: "" with port 0 (none).
func tunnelAddress(bindAddress string, port int) string {
	if port == 0 {
		return ""
	}
	return net.JoinHostPort(bindAddress, strconv.Itoa(port))
}
