// Command skiff runs every skiff service in one process with an embedded etcd: the
// apiserver, the scheduler, a built-in CRI runtime and one kubelet. Point kubectl at the
// kubeconfig it prints.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"skiff.dev/services/allinone"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/cri/containerd"
	"skiff.dev/services/internal/serving"

	"skiff.dev/services/controllermanager"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pki" {
		os.Exit(pkiMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "nats-config" {
		os.Exit(natsConfigMain(os.Args[2:], os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == "kube-dns" {
		os.Exit(kubeDNSMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		os.Exit(containerdMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "token" {
		os.Exit(tokenMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	dataDir := os.Getenv("SKIFF_DATA_DIR")
	if dataDir == "" {
		dataDir = "./skiff-data"
	}
	var cfg allinone.Config
	var runtimeName string
	flag.StringVar(&cfg.DataDir, "data-dir", dataDir, "directory for etcd data, runtime and kubelet state and the admin kubeconfig (env SKIFF_DATA_DIR)")
	flag.StringVar(&cfg.BindAddress, "bind-address", "127.0.0.1", "address every service listens on")
	flag.IntVar(&cfg.APIServerPort, "apiserver-port", 6443, "apiserver port (0 = any free port)")
	flag.IntVar(&cfg.EtcdPort, "etcd-port", 2379, "embedded etcd client port (0 = any free port)")
	flag.IntVar(&cfg.ExecProxyPort, "exec-proxy-port", 10443, "exec-proxy port, for kubectl exec/attach/port-forward/logs (0 = any free port)")
	flag.IntVar(&cfg.KubeletPort, "kubelet-port", 10250, "kubelet API port (0 = any free port)")
	flag.IntVar(&cfg.NATSPort, "nats-port", 4222, "embedded NATS port events travel through (0 = any free port, -1 = no NATS: events are POSTed)")
	flag.StringVar(&runtimeName, "runtime", "process", "CRI runtime: process (real host processes), sim (simulated containers) or containerd (real containers: a private containerd under --data-dir, or --container-runtime-endpoint)")
	flag.StringVar(&cfg.RuntimeEndpoint, "container-runtime-endpoint", "", "with --runtime containerd: a containerd you run (unix:///run/containerd/containerd.sock or tcp://HOST:PORT); empty starts a private one")
	flag.StringVar(&cfg.SandboxImage, "pod-infra-container-image", "", "the private containerd's pod sandbox (pause) image (default "+containerd.DefaultSandboxImage+")")
	flag.StringVar(&cfg.PodCIDR, "pod-cidr", allinone.DefaultPodCIDR, "the node's pod IP range while its spec.podCIDR is empty")
	flag.StringVar(&cfg.NodeName, "node-name", "", "the kubelet's node name (default: host name)")
	compactionInterval := flag.Duration("etcd-compaction-interval", etcd3.DefaultCompactionInterval, "how often etcd's history is compacted; reads and watches older than one to two intervals get 410 (0 = never)")
	flag.IntVar(&cfg.HollowNodes, "hollow-nodes", 0, "also run this many hollow nodes (hollow-0, hollow-1, ...): real kubelets over simulated runtimes, as kubemark's, for scale tests")
	runProxy := flag.Bool("proxy", true, "run the proxy (kube-proxy's nftables mode) so that Service ClusterIPs and NodePorts forward on this host; needs root or CAP_NET_ADMIN and nft, and runs without (saying so) where they are missing")
	flag.StringVar(&cfg.ProxyTable, "proxy-table", "", "the proxy's nftables table, family ip (default skiff-proxy); all-in-ones side by side each need their own")
	csrAutoApprove := flag.Bool("csr-auto-approve", true, "let csr-signer approve kubelet certificate requests that pass its checks; false leaves every request to `kubectl certificate approve`")
	flag.StringVar(&cfg.CoreDNS, "coredns", allinone.FindCoreDNS(), "CoreDNS binary to run as the cluster DNS (kube-system/kube-dns, "+allinone.KubeDNSServiceIP+"); default: coredns beside this binary (make coredns) when present; empty runs none")
	flag.IntVar(&cfg.CoreDNSPort, "coredns-port", allinone.DefaultCoreDNSPort, "port CoreDNS listens on (UDP and TCP) at --bind-address; the kube-dns Service maps port 53 to it (0 = any free port)")
	clusterDNS := flag.String("cluster-dns", "", "comma-separated DNS server IPs the kubelet writes into ClusterFirst pods' resolv.conf (default: the kube-dns Service IP when CoreDNS runs, else none: pods get the node's resolvers)")
	// One process: its /healthz, /metrics and, with --profiling, /debug/pprof cover every
	// service in it.
	srv := serving.NewOptions("")
	srv.AddFlags(flag.CommandLine)
	// The in-process controller manager takes kube-controller-manager's flags
	// (--node-monitor-grace-period, --controllers, --cluster-cidr, ...).
	cfg.ControllerManager = controllermanager.DefaultOptions()
	cfg.ControllerManager.AddFlags(flag.CommandLine)
	flag.Parse()
	cfg.Runtime = allinone.Runtime(runtimeName)
	if *clusterDNS != "" {
		cfg.ClusterDNS = strings.Split(*clusterDNS, ",")
	}
	cfg.ManualCSRApproval = !*csrAutoApprove
	cfg.NoProxy = !*runProxy
	cfg.EtcdCompactionInterval = *compactionInterval
	if cfg.EtcdCompactionInterval == 0 {
		cfg.EtcdCompactionInterval = -1 // the flag's 0, as kube-apiserver's: never
	}

	srv.Logger("skiff")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := srv.Start(ctx, serving.NewRegistry()); err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
	cluster, wait, err := allinone.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
	slog.Info("skiff is running", "apiserver", cluster.APIServerURL, "runtime", cfg.Runtime, "staticPodPath", cluster.StaticPodPath, "dns", cluster.DNSAddress)
	if cluster.NATSURL != "" {
		// For a kubelet joined from outside (--nats-url); a comment to a shell. Before
		// the export line, which scripts wait for.
		fmt.Printf("# events: NATS at %s\n", cluster.NATSURL)
	}
	fmt.Printf("export KUBECONFIG=%s\n", cluster.Kubeconfig)
	<-ctx.Done()
	slog.Info("stopping")
	if err := wait(); err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
}
