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
	"syscall"

	"skiff.dev/services/allinone"
	"skiff.dev/services/runtime/containerd"

	"skiff.dev/services/controllermanager"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pki" {
		os.Exit(pkiMain(os.Args[2:]))
	}
	dataDir := os.Getenv("SKIFF_DATA_DIR")
	if dataDir == "" {
		dataDir = "./skiff-data"
	}
	var cfg allinone.Config
	var runtimeName, logLevel string
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
	profiling := flag.Bool("profiling", false, "serve Go's /debug/pprof for every service of the process on --profiling-port")
	profilingPort := flag.Int("profiling-port", 6060, "port of /debug/pprof with --profiling, on --bind-address")
	flag.IntVar(&cfg.HollowNodes, "hollow-nodes", 0, "also run this many hollow nodes (hollow-0, hollow-1, ...): real kubelets over simulated runtimes, as kubemark's, for scale tests")
	csrAutoApprove := flag.Bool("csr-auto-approve", true, "let csr-signer approve kubelet certificate requests that pass its checks; false leaves every request to `kubectl certificate approve`")
	flag.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	// The in-process controller manager takes kube-controller-manager's flags
	// (--node-monitor-grace-period, --controllers, --cluster-cidr, ...).
	cfg.ControllerManager = controllermanager.DefaultOptions()
	cfg.ControllerManager.AddFlags(flag.CommandLine)
	flag.Parse()
	cfg.Runtime = allinone.Runtime(runtimeName)
	if *profiling {
		cfg.ProfilingPort = *profilingPort
	}
	cfg.ManualCSRApproval = !*csrAutoApprove

	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "skiff: --log-level: %v\n", err)
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cluster, wait, err := allinone.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
	slog.Info("skiff is running", "apiserver", cluster.APIServerURL, "runtime", cfg.Runtime, "staticPodPath", cluster.StaticPodPath)
	fmt.Printf("export KUBECONFIG=%s\n", cluster.Kubeconfig)
	<-ctx.Done()
	slog.Info("stopping")
	if err := wait(); err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
}
