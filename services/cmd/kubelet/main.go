// Command kubelet runs skiff's node agent against an API server and a CRI
// runtime.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
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

	kl, err := kubelet.New(kubelet.Config{
		NodeName:        *nodeName,
		Client:          client,
		RuntimeEndpoint: *endpoint,
		RootDir:         *rootDir,
		NodeIP:          *nodeIP,
		HealthzAddr:     *healthzAddr,
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
