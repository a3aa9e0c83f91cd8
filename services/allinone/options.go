package allinone

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/controllermanager"
	"skiff.dev/services/cri/containerd"
	"skiff.dev/services/internal/serving"
)

// Options are skiff's flags (`skiff --help`): where the all-in-one keeps its state,
// which ports it listens on, the runtime, and the in-process controller manager's
// kube-controller-manager flags. Build them with NewOptions, register them with
// AddFlags, then Run.
type Options struct {
	// Config is what Start runs; the flags fill it.
	Config Config
	// Serving are the flags every service shares (logging, /healthz, /metrics,
	// --profiling): in one process they cover every service in it.
	Serving *serving.Options

	// The flags that fill Config after parsing (complete).
	runtime                  string
	clusterDNS               string
	csrAutoApprove, runProxy bool
	etcdInProcess            bool
}

// NewOptions returns skiff's defaults, its data directory dataDir ($SKIFF_DATA_DIR,
// else ./skiff-data, in the caller's hands).
func NewOptions(dataDir string) *Options {
	o := &Options{Serving: serving.NewOptions(""), runtime: string(RuntimeProcess), csrAutoApprove: true, runProxy: true, etcdInProcess: true}
	o.Config = Config{DataDir: dataDir, BindAddress: "127.0.0.1", APIServerPort: 6443, EtcdPort: 2379,
		ExecProxyPort: 10443, KubeletPort: 10250, NATSPort: 4222, PodCIDR: DefaultPodCIDR,
		CoreDNS: FindCoreDNS(), CoreDNSPort: DefaultCoreDNSPort, EtcdCompactionInterval: etcd3.DefaultCompactionInterval,
		ControllerManager: controllermanager.DefaultOptions()}
	return o
}

// AddFlags registers o's flags on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	c := &o.Config
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for etcd data, runtime and kubelet state and the admin kubeconfig (env SKIFF_DATA_DIR)")
	fs.StringVar(&c.BindAddress, "bind-address", c.BindAddress, "address every service listens on")
	fs.IntVar(&c.APIServerPort, "apiserver-port", c.APIServerPort, "apiserver port (0 = any free port)")
	fs.IntVar(&c.EtcdPort, "etcd-port", c.EtcdPort, "embedded etcd client port (0 = any free port)")
	fs.IntVar(&c.ExecProxyPort, "exec-proxy-port", c.ExecProxyPort, "exec-proxy port, for kubectl exec/attach/port-forward/logs (0 = any free port)")
	fs.IntVar(&c.KubeletPort, "kubelet-port", c.KubeletPort, "kubelet API port (0 = any free port)")
	fs.IntVar(&c.NATSPort, "nats-port", c.NATSPort, "embedded NATS port events travel through (0 = any free port, -1 = no NATS: events are POSTed)")
	fs.StringVar(&o.runtime, "runtime", o.runtime, "CRI runtime: process (real host processes), sim (simulated containers) or containerd (real containers: a private containerd under --data-dir, or --container-runtime-endpoint)")
	fs.StringVar(&c.RuntimeEndpoint, "container-runtime-endpoint", c.RuntimeEndpoint, "with --runtime containerd: a containerd you run (unix:///run/containerd/containerd.sock or tcp://HOST:PORT); empty starts a private one")
	fs.StringVar(&c.SandboxImage, "pod-infra-container-image", c.SandboxImage, "the private containerd's pod sandbox (pause) image (default "+containerd.DefaultSandboxImage+")")
	fs.StringVar(&c.PodCIDR, "pod-cidr", c.PodCIDR, "the node's pod IP range while its spec.podCIDR is empty")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "the kubelet's node name (default: host name)")
	fs.DurationVar(&c.EtcdCompactionInterval, "etcd-compaction-interval", c.EtcdCompactionInterval, "how often etcd's history is compacted; reads and watches older than one to two intervals get 410 (0 = never)")
	fs.BoolVar(&o.etcdInProcess, "etcd-in-process", o.etcdInProcess, "the apiserver calls the embedded etcd by function calls; false dials it over gRPC with mutual TLS on loopback, as a separate etcd (slower: encoding, TLS and HTTP/2 on every request)")
	fs.IntVar(&c.HollowNodes, "hollow-nodes", c.HollowNodes, "also run this many hollow nodes (hollow-0, hollow-1, ...): real kubelets over simulated runtimes, as kubemark's, for scale tests")
	fs.BoolVar(&o.runProxy, "proxy", o.runProxy, "run the proxy (kube-proxy's nftables mode) so that Service ClusterIPs and NodePorts forward on this host; needs root or CAP_NET_ADMIN and nft, and runs without (saying so) where they are missing")
	fs.StringVar(&c.ProxyTable, "proxy-table", c.ProxyTable, "the proxy's nftables table, family ip (default skiff-proxy); all-in-ones side by side each need their own")
	fs.BoolVar(&o.csrAutoApprove, "csr-auto-approve", o.csrAutoApprove, "let csr-signer approve kubelet certificate requests that pass its checks; false leaves every request to `kubectl certificate approve`")
	fs.StringVar(&c.CoreDNS, "coredns", c.CoreDNS, "CoreDNS binary to run as the cluster DNS (kube-system/kube-dns, "+KubeDNSServiceIP+"); default: coredns beside this binary (make coredns) when present; empty runs none")
	fs.IntVar(&c.CoreDNSPort, "coredns-port", c.CoreDNSPort, "port CoreDNS listens on (UDP and TCP) at --bind-address; the kube-dns Service maps port 53 to it (0 = any free port)")
	fs.StringVar(&o.clusterDNS, "cluster-dns", o.clusterDNS, "comma-separated DNS server IPs the kubelet writes into ClusterFirst pods' resolv.conf (default: the kube-dns Service IP when CoreDNS runs, else none: pods get the node's resolvers)")
	o.Serving.AddFlags(fs)
	// The in-process controller manager takes kube-controller-manager's flags
	// (--node-monitor-grace-period, --controllers, --cluster-cidr, ...).
	c.ControllerManager.AddFlags(fs)
}

// Logger is the process's logger from the shared logging flags (it exits 2 on invalid
// ones, as a flag parse error does).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("skiff") }

// complete folds the flags that do not map one to one into Config.
func (o *Options) complete() {
	c := &o.Config
	c.Runtime = Runtime(o.runtime)
	if o.clusterDNS != "" {
		c.ClusterDNS = strings.Split(o.clusterDNS, ",")
	}
	c.ManualCSRApproval = !o.csrAutoApprove
	c.NoProxy = !o.runProxy
	c.EtcdOverGRPC = !o.etcdInProcess
	if c.EtcdCompactionInterval == 0 {
		c.EtcdCompactionInterval = -1 // the flag's 0, as kube-apiserver's: never
	}
}

// Run starts the all-in-one, prints the line a shell evaluates (`export
// KUBECONFIG=...`, after a comment naming NATS for kubelets joined from elsewhere), and
// runs until ctx ends. Errors: Start's, or a service's that stopped.
func (o *Options) Run(ctx context.Context) error {
	o.complete()
	if _, err := o.Serving.Start(ctx, serving.NewRegistry()); err != nil {
		return err
	}
	cluster, wait, err := Start(ctx, o.Config)
	if err != nil {
		return err
	}
	slog.Info("skiff is running", "apiserver", cluster.APIServerURL, "runtime", o.Config.Runtime, "staticPodPath", cluster.StaticPodPath, "dns", cluster.DNSAddress)
	if cluster.NATSURL != "" {
		// For a kubelet joined from outside (--nats-url); a comment to a shell. Before
		// the export line, which scripts wait for.
		fmt.Printf("# events: NATS at %s\n", cluster.NATSURL)
	}
	fmt.Printf("export KUBECONFIG=%s\n", cluster.Kubeconfig)
	<-ctx.Done()
	slog.Info("stopping")
	return wait()
}
