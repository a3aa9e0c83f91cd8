// Command exec-proxy runs skiff's exec-proxy: it carries kubectl exec, attach,
// port-forward and logs from the apiserver to the kubelet on the pod's node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	caFile := flag.String("client-ca-file", "", "cluster CA: verifies the kubelets' serving certificates and their tunnels' client certificates")
	requestHeaderCAFile := flag.String("requestheader-client-ca-file", "", "front-proxy CA (pki: front-proxy-ca.crt): the only CA whose client certificates may call exec-proxy; required")
	allowedNames := flag.String("requestheader-allowed-names", execproxy.FrontProxyUser, "comma-separated client certificate CNs whose X-Remote-User/X-Remote-Group headers are trusted")
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
	files := tlsFiles{cert: *certFile, key: *keyFile, clusterCA: *caFile, frontProxyCA: *requestHeaderCAFile, kubeletCert: *kubeletCert, kubeletKey: *kubeletKey}
	if err := run(ctx, logger, srv, *kubeconfig, net.JoinHostPort(*bindAddress, strconv.Itoa(*port)), tunnelAddress(*bindAddress, *tunnelPort), files,
		strings.Split(*allowedNames, ",")); err != nil {
		logger.Error("exec-proxy stopped", "err", err)
		os.Exit(1)
	}
}

// tlsFiles are exec-proxy's certificate flags.
type tlsFiles struct {
	cert, key               string // serving pair
	clusterCA, frontProxyCA string // --client-ca-file, --requestheader-client-ca-file
	kubeletCert, kubeletKey string // client pair toward kubelets
}

func run(ctx context.Context, logger *slog.Logger, srv *serving.Options, kubeconfig, addr, tunnelAddr string, files tlsFiles, allowedNames []string) error {
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "exec-proxy"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	caPEM, err := pki.ReadCA("", files.clusterCA)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	if files.frontProxyCA == "" {
		return errors.New("--requestheader-client-ca-file is required: the front-proxy CA that issued the apiserver's front-proxy-client certificate")
	}
	frontProxyCAPEM, err := pki.ReadCA("", files.frontProxyCA)
	if err != nil {
		return fmt.Errorf("--requestheader-client-ca-file: %w", err)
	}
	// The HTTPS port takes client certificates of the front-proxy CA only; the tunnel
	// port, nodes' certificates of the cluster CA.
	servingTLS, err := pki.ServingTLS(files.cert, files.key, frontProxyCAPEM)
	if err != nil {
		return err
	}
	clusterCAs, err := pki.CertPool(caPEM)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	kubeletTLS, err := pki.ReloadingClientTLS(caPEM, files.kubeletCert, files.kubeletKey)
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
	cfgProxy := execproxy.Config{Client: client, KubeletTLS: kubeletTLS, Logger: logger, TracerProvider: tp, AllowedNames: allowedNames}
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
			if err := tunnels.Serve(ctx, tl, tunnel.ServerTLS(servingTLS.Certificates[0], clusterCAs)); err != nil {
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
