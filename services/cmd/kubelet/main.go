// Command kubelet runs skiff's node agent against an API server and a CRI
// runtime.
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
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/kubelet"
)

func main() {
	hostname, _ := os.Hostname()
	nodeName := flag.String("node-name", strings.ToLower(hostname), "name of the Node object this kubelet registers")
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file; empty uses the in-cluster configuration")
	endpoint := flag.String("container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI runtime socket (unix:///path or a path)")
	rootDir := flag.String("root-dir", kubelet.DefaultRootDir, "directory for kubelet state and pod logs")
	nodeIP := flag.String("node-ip", "", "IP address reported for the node; empty picks the first non-loopback IPv4")
	healthzAddr := flag.String("healthz-addr", "", "address of the plain-HTTP /healthz endpoint, e.g. :10248; empty disables it")
	address := flag.String("address", "0.0.0.0", "address the kubelet API (exec, attach, port-forward, logs) listens on")
	port := flag.Int("port", kubelet.KubeletPort, "kubelet API HTTPS port")
	tlsCertFile := flag.String("tls-cert-file", "", "kubelet API serving certificate; empty serves no kubelet API")
	tlsKeyFile := flag.String("tls-private-key-file", "", "kubelet API serving key")
	clientCAFile := flag.String("client-ca-file", "", "cluster CA verifying the kubelet API's clients (exec-proxy, system:masters)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logger.Error("load kubeconfig", "err", err)
		os.Exit(1)
	}
	// skiff's API server reads JSON bodies; typed clients default to
	// protobuf.
	restConfig.ContentType = "application/json"
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		logger.Error("build client", "err", err)
		os.Exit(1)
	}

	var serverAddr string
	var serverTLS *tls.Config
	if *tlsCertFile != "" {
		serverTLS, err = kubeletServerTLS(*tlsCertFile, *tlsKeyFile, *clientCAFile)
		if err != nil {
			logger.Error("kubelet API TLS", "err", err)
			os.Exit(1)
		}
		serverAddr = net.JoinHostPort(*address, strconv.Itoa(*port))
	}

	kl, err := kubelet.New(kubelet.Config{
		NodeName:        *nodeName,
		Client:          client,
		RuntimeEndpoint: *endpoint,
		RootDir:         *rootDir,
		NodeIP:          *nodeIP,
		HealthzAddr:     *healthzAddr,
		ServerAddr:      serverAddr,
		ServerTLS:       serverTLS,
		Logger:          logger,
	})
	if err != nil {
		logger.Error("create kubelet", "err", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := kl.Run(ctx); err != nil {
		logger.Error("kubelet failed", "err", err)
		os.Exit(1)
	}
}

// kubeletServerTLS loads the kubelet API's serving key pair and the CA its
// clients' certificates must chain to.
func kubeletServerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--client-ca-file %s holds no certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool}, nil
}
