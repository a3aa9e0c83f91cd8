// Command proxy is skiff's kube-proxy: on one node it watches Services and
// EndpointSlices and programs the node's nftables (table ip skiff-proxy) so that
// ClusterIPs, NodePorts and external IPs reach the Services' ready endpoints. It needs
// root or CAP_NET_ADMIN and the nft binary; without them it says so and exits 1.
// `proxy --cleanup` deletes the table and exits, as `kube-proxy --cleanup` does.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/proxy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the system:kube-proxy identity (ClusterRole system:node-proxier); required unless --cleanup")
	nodeName := flag.String("hostname-override", "", "this node's name, for the Local traffic policies (default: the host name)")
	table := flag.String("table", proxy.DefaultTable, "the nftables table (family ip) the proxy owns")
	minSync := flag.Duration("min-sync-period", time.Second, "least time between two rule syncs")
	syncPeriod := flag.Duration("sync-period", 30*time.Second, "longest time between two rule syncs")
	cleanup := flag.Bool("cleanup", false, "delete the proxy's table and exit")
	cleanupOnExit := flag.Bool("cleanup-on-exit", false, "delete the table when stopped (kube-proxy keeps its rules across restarts)")
	// kube-proxy's listeners: the probes on every interface at 10256, /metrics (and
	// /debug/pprof) on loopback only at 10249, neither authenticated.
	srv := serving.NewOptions(":10256")
	srv.MetricsAddress = "127.0.0.1:10249"
	contentType := kubeclient.AddContentTypeFlag(flag.CommandLine)
	srv.AddFlags(flag.CommandLine)
	flag.Parse()

	logger := srv.Logger("proxy")
	fail := func(msg string, err error) {
		logger.Error(msg, "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nft, err := proxy.NewNFTables(*table)
	if err != nil {
		fail("no proxy on this node", err)
	}
	if *cleanup {
		if err := proxy.Cleanup(ctx, nft); err != nil {
			fail("deleting table "+*table, err)
		}
		logger.Info("deleted the proxy's table", "table", "ip "+*table)
		return
	}
	if *kubeconfig == "" {
		logger.Error("--kubeconfig is required")
		os.Exit(2)
	}
	if *nodeName == "" {
		if *nodeName, err = os.Hostname(); err != nil {
			fail("node name", err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("loading kubeconfig", err)
	}
	kubeclient.SetContentType(cfg, *contentType)
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "proxy"})
	if err != nil {
		fail("tracing", err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.WrapTransport = tracing.WrapTransport(tp)
	cfg.UserAgent = "skiff-proxy"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("building clientset", err)
	}
	p, err := proxy.New(proxy.Config{Client: client, NodeName: *nodeName, Table: *table, NFTables: nft,
		MinSyncPeriod: *minSync, SyncPeriod: *syncPeriod, CleanupOnExit: *cleanupOnExit, Logger: logger})
	if err != nil {
		fail("building the proxy", err)
	}
	if _, err := srv.Start(ctx, serving.NewRegistry(p.Metrics()), serving.WithReadiness(p.Ready)); err != nil {
		fail("health endpoints", err)
	}
	if err := p.Run(ctx); err != nil && ctx.Err() == nil {
		fail("proxy stopped", err)
	}
}
