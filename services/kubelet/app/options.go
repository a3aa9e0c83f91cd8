// Package app is the kubelet's startup, as kube's cmd/kubelet/app: Options (every flag
// of the kubelet command) → Config (the built client, event recorder, serving
// certificate and tunnel) → Run. The kubelet command parses flags into Options and
// runs them; the all-in-one builds a Config directly from its own identities.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/cm"
	"skiff.dev/services/kubelet/eviction"
	"skiff.dev/services/kubelet/hollow"
)

// Options are the kubelet command's flags, kube's KubeletFlags and
// KubeletConfiguration folded into one: each field is the flag named in its comment.
type Options struct {
	// NodeName is the Node object this kubelet registers (--node-name; default the host
	// name, lower-cased).
	NodeName string
	// Client is --kubeconfig (the kubelet's own, written by the TLS bootstrap with
	// BootstrapKubeconfig; "" is the in-cluster configuration), --kube-api-content-type,
	// --kube-api-qps (default 50) and --kube-api-burst (default 100).
	Client componentbase.ClientOptions
	// BootstrapKubeconfig holds a bootstrap token the client certificate is requested
	// with (a CSR) when Client.Kubeconfig is missing or expired (--bootstrap-kubeconfig).
	BootstrapKubeconfig string
	// CertDir holds the kubelet's key pairs, kubelet-client-current.pem and
	// kubelet-server-current.pem (--cert-dir); "" means <RootDir>/pki.
	CertDir string
	// RotateCertificates renews the client certificate through a new CSR before it
	// expires (--rotate-certificates, default true).
	RotateCertificates bool
	// RotateServerCertificates requests the kubelet API's serving certificate from the
	// cluster (signer kubernetes.io/kubelet-serving) and renews it, without TLSCertFile
	// (--rotate-server-certificates, default true).
	RotateServerCertificates bool
	// ContainerRuntimeEndpoint is the CRI runtime: unix:///path, a path, or
	// tcp://host:port (--container-runtime-endpoint).
	ContainerRuntimeEndpoint string
	// PodCIDR is the pod IP range used while the Node's spec.podCIDR is empty
	// (--pod-cidr).
	PodCIDR string
	// CgroupDriver is cgroupfs or systemd (--cgroup-driver); the runtime's answer wins.
	CgroupDriver string
	// ClusterDNS are the cluster DNS server IPs, comma-separated (--cluster-dns).
	ClusterDNS string
	// ClusterDomain is the cluster's DNS domain (--cluster-domain).
	ClusterDomain string
	// ContainerLogMaxSize is a quantity (10Mi) past which a container log is rotated
	// (--container-log-max-size).
	ContainerLogMaxSize string
	// ContainerLogMaxFiles is how many log files a container keeps
	// (--container-log-max-files).
	ContainerLogMaxFiles int
	// ResolvConf is the node's resolver config, the base of dnsPolicy Default
	// (--resolv-conf).
	ResolvConf string
	// RootDir holds the kubelet's state and pod logs (--root-dir).
	RootDir string
	// NodeIP is the address reported for the node (--node-ip); "" picks the first
	// non-loopback IPv4.
	NodeIP string
	// Address and Port are where the kubelet API listens (--address, --port).
	Address string
	Port    int
	// TLSCertFile and TLSPrivateKeyFile are the kubelet API's serving pair
	// (--tls-cert-file, --tls-private-key-file); "" requests one from the cluster with
	// RotateServerCertificates, else serves no kubelet API.
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile verifies the kubelet API's clients (--client-ca-file); "" means the
	// CA of Client.Kubeconfig.
	ClientCAFile string
	// NATS is --nats-url and the client TLS toward NATS (--nats-ca-file, default
	// ClientCAFile else the CA of the kubeconfig; --nats-cert-file, default
	// <cert-dir>/kubelet-client-current.pem, read at every connect; --nats-key-file,
	// default the certificate's file).
	NATS componentbase.NATSOptions
	// PodManifestPath is the static pods' directory or file (--pod-manifest-path).
	PodManifestPath string
	// FileCheckFrequency is how often PodManifestPath is read again
	// (--file-check-frequency).
	FileCheckFrequency time.Duration
	// EvictionHard are the node-pressure thresholds, kube's syntax (--eviction-hard).
	EvictionHard string
	// EventedPLEG reads the runtime's container events and relists every 5 min
	// (--evented-pleg, default true).
	EventedPLEG bool
	// AllowedUnsafeSysctls are comma-separated sysctls or prefixes ending in * pods may
	// set besides kube's safe ones (--allowed-unsafe-sysctls).
	AllowedUnsafeSysctls string
	// HollowNodes > 0 runs that many hollow nodes (kubemark's) instead of one kubelet
	// (--hollow-nodes).
	HollowNodes int
	// HollowNamePrefix starts the hollow nodes' names (--hollow-name-prefix).
	HollowNamePrefix string
	// Serving are the logs, health and metrics endpoints (--log-level, --log-format,
	// --health-address and its deprecated --healthz-addr, --metrics-bind-address,
	// --profiling); off by default.
	Serving *serving.Options
	// TunnelServer is exec-proxy's tunnel address, host:port, which the kubelet dials
	// out to (--tunnel-server); "" means no tunnel.
	TunnelServer string
	// TunnelCAFile verifies exec-proxy's tunnel certificate (--tunnel-ca-file; default
	// ClientCAFile, else the CA of the kubeconfig).
	TunnelCAFile string
	// TunnelCertFile and TunnelKeyFile are the node's client pair toward the tunnel
	// (--tunnel-cert-file, default <cert-dir>/kubelet-client-current.pem;
	// --tunnel-key-file, default the certificate's file).
	TunnelCertFile, TunnelKeyFile string
	// TunnelServerName is the name the tunnel's certificate must carry
	// (--tunnel-server-name; default TunnelServer's host).
	TunnelServerName string
}

// NewOptions returns the kubelet command's defaults.
func NewOptions() *Options {
	hostname, _ := os.Hostname()
	return &Options{
		NodeName:                 strings.ToLower(hostname),
		Client:                   componentbase.NewClientOptions(50, 100),
		RotateCertificates:       true,
		RotateServerCertificates: true,
		ContainerRuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		CgroupDriver:             string(cm.CgroupDriverCgroupfs),
		ClusterDomain:            "cluster.local",
		ContainerLogMaxSize:      "10Mi",
		ContainerLogMaxFiles:     5,
		ResolvConf:               "/etc/resolv.conf",
		RootDir:                  kubelet.DefaultRootDir,
		Address:                  "0.0.0.0",
		Port:                     kubelet.KubeletPort,
		FileCheckFrequency:       20 * time.Second,
		EvictionHard:             eviction.DefaultEvictionHard,
		EventedPLEG:              true,
		HollowNamePrefix:         hollow.DefaultNamePrefix,
		Serving:                  serving.NewOptions(""),
	}
}

// AddFlags registers the kubelet command's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of the Node object this kubelet registers")
	o.Client.AddFlags(fs, "path to the kubelet's kubeconfig, written by the TLS bootstrap when --bootstrap-kubeconfig is set; empty uses the in-cluster configuration")
	// The kubelet's own wording of the rate limit, as before componentbase.
	fs.Lookup("kube-api-qps").Usage = "requests per second to the apiserver (kubelet's --kube-api-qps; client-go's own default is 5)"
	fs.Lookup("kube-api-burst").Usage = "burst of requests to the apiserver (kubelet's --kube-api-burst)"
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", o.BootstrapKubeconfig, "kubeconfig with a bootstrap token, used to request a client certificate (CSR) when --kubeconfig is missing or expired")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "directory of the kubelet's key pairs (kubelet-client-current.pem, kubelet-server-current.pem); empty means <root-dir>/pki")
	fs.BoolVar(&o.RotateCertificates, "rotate-certificates", o.RotateCertificates, "renew the client certificate through a new CertificateSigningRequest before it expires")
	fs.BoolVar(&o.RotateServerCertificates, "rotate-server-certificates", o.RotateServerCertificates, "without --tls-cert-file, request the kubelet API's serving certificate from the cluster (signer kubernetes.io/kubelet-serving) and renew it")
	fs.StringVar(&o.ContainerRuntimeEndpoint, "container-runtime-endpoint", o.ContainerRuntimeEndpoint, "CRI runtime endpoint: unix:///path (or a path) or tcp://host:port (plain gRPC: a trusted network only)")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "pod IP range used while the Node's spec.podCIDR is empty (no controller-manager allocating ranges); the Node's wins when set")
	fs.StringVar(&o.CgroupDriver, "cgroup-driver", o.CgroupDriver, "how pods' cgroups are named: cgroupfs or systemd; the runtime's answer to CRI RuntimeConfig wins when it gives one (kube's KubeletCgroupDriverFromCRI)")
	fs.StringVar(&o.ClusterDNS, "cluster-dns", o.ClusterDNS, "comma-separated cluster DNS server IPs for dnsPolicy ClusterFirst pods; empty gives them the node's resolver")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "the cluster's DNS domain, in ClusterFirst pods' search path")
	fs.StringVar(&o.ContainerLogMaxSize, "container-log-max-size", o.ContainerLogMaxSize, "size past which a running container's log file is rotated (a quantity: 10Mi, 1Gi)")
	fs.IntVar(&o.ContainerLogMaxFiles, "container-log-max-files", o.ContainerLogMaxFiles, "log files kept per container, the live one included (at least 2)")
	fs.StringVar(&o.ResolvConf, "resolv-conf", o.ResolvConf, "the node's resolver config, the base of dnsPolicy Default")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "directory for kubelet state and pod logs")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "IP address reported for the node; empty picks the first non-loopback IPv4")
	fs.StringVar(&o.Address, "address", o.Address, "address the kubelet API (exec, attach, port-forward, logs) listens on")
	fs.IntVar(&o.Port, "port", o.Port, "kubelet API HTTPS port")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "kubelet API serving certificate; empty serves no kubelet API")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "kubelet API serving key")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "cluster CA verifying the kubelet API's clients (exec-proxy, system:masters); empty means the CA of --kubeconfig")
	o.NATS.AddFlagsWithDefaults(fs, "--client-ca-file, else the CA of --kubeconfig", "<cert-dir>/kubelet-client-current.pem", "the --nats-cert-file file, which then holds both")
	fs.Lookup("nats-cert-file").Usage = "client certificate toward NATS, which requires mutual TLS; read at every connect, so a rotated one is used (default: <cert-dir>/kubelet-client-current.pem)"
	fs.StringVar(&o.PodManifestPath, "pod-manifest-path", o.PodManifestPath, "directory (or file) of static pod manifests the kubelet runs on its own and mirrors into the API server; empty means none")
	fs.DurationVar(&o.FileCheckFrequency, "file-check-frequency", o.FileCheckFrequency, "how often --pod-manifest-path is read again")
	fs.StringVar(&o.EvictionHard, "eviction-hard", o.EvictionHard, "thresholds (signal<quantity or percentage, comma-separated; signals memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available) below which the node reports MemoryPressure, DiskPressure or PIDPressure; pods are not evicted")
	fs.BoolVar(&o.EventedPLEG, "evented-pleg", o.EventedPLEG, "read the runtime's container events (CRI GetContainerEvents) and relist it only every 5 min, as kube's EventedPLEG feature gate does; false, or a runtime without the event stream (containerd before 1.7), relists every second")
	fs.StringVar(&o.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", o.AllowedUnsafeSysctls, "comma-separated sysctls (or prefixes ending in *, e.g. 'net.core.*') pods may set besides kube's safe ones; a pod asking for another is rejected (SysctlForbidden)")
	fs.IntVar(&o.HollowNodes, "hollow-nodes", o.HollowNodes, "run this many hollow nodes (kubemark's) instead of one kubelet: each the real kubelet over its own simulated runtime, joining through --bootstrap-kubeconfig, with its state under <root-dir>/<name>; no kubelet API")
	fs.StringVar(&o.HollowNamePrefix, "hollow-name-prefix", o.HollowNamePrefix, "with --hollow-nodes, the nodes' names are this prefix followed by 0, 1, ...")
	o.Serving.AddFlags(fs)
	// The flag compose.yaml and earlier releases use: the same as --health-address.
	fs.StringVar(&o.Serving.HealthAddress, "healthz-addr", o.Serving.HealthAddress, "deprecated: use --health-address")
	fs.StringVar(&o.TunnelServer, "tunnel-server", o.TunnelServer, "exec-proxy's tunnel address (host:port, port 10444): the kubelet dials out and holds a tunnel there, through which exec-proxy reaches its kubelet API when it cannot route to the node's address (as konnectivity's agent); empty means none")
	fs.StringVar(&o.TunnelCAFile, "tunnel-ca-file", o.TunnelCAFile, "CA verifying exec-proxy's tunnel certificate (default: --client-ca-file, else the CA of --kubeconfig)")
	fs.StringVar(&o.TunnelCertFile, "tunnel-cert-file", o.TunnelCertFile, "the node's client certificate toward exec-proxy's tunnel, system:node:<node-name>; read at every connect, so a rotated one is used (default: <cert-dir>/kubelet-client-current.pem, which also holds the key)")
	fs.StringVar(&o.TunnelKeyFile, "tunnel-key-file", o.TunnelKeyFile, "its key (default: the --tunnel-cert-file file)")
	fs.StringVar(&o.TunnelServerName, "tunnel-server-name", o.TunnelServerName, "the name exec-proxy's tunnel certificate must carry, where --tunnel-server is a relay's address (default: the host of --tunnel-server)")
}

// Validate reports the first flag value the kubelet refuses, as a
// componentbase.UsageError (exit 2): the logging and serving options, --cgroup-driver,
// --container-log-max-size and, for one kubelet (not hollow nodes), --eviction-hard
// and a --tunnel-server without a kubelet API for it to carry.
func (o *Options) Validate() error {
	if err := o.Serving.Validate(); err != nil {
		return componentbase.Usagef(err)
	}
	if _, err := o.cgroupDriver(); err != nil {
		return componentbase.Usagef(err)
	}
	if _, err := o.containerLogMaxSize(); err != nil {
		return componentbase.Usagef(err)
	}
	if o.HollowNodes > 0 {
		return nil
	}
	if _, err := o.evictionHard(); err != nil {
		return componentbase.Usagef(err)
	}
	if o.TunnelServer != "" && !o.servesAPI() {
		return componentbase.Usagef(errors.New("--tunnel-server needs the kubelet API (--tls-cert-file or --rotate-server-certificates), which the tunnel carries"))
	}
	return nil
}

// Logger validates the logging flags, makes their logger slog's default and returns
// it; invalid ones exit 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("kubelet") }

// Run runs the kubelet, or with HollowNodes its hollow nodes, until ctx ends: Validate,
// Config, Config.Run, then the tracer provider Config made is shut down. Errors:
// Validate's (UsageError), Config's and Run's.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.HollowNodes > 0 {
		return o.runHollowNodes(ctx)
	}
	cfg, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(cfg.Kubelet.TracerProvider)
	return cfg.Run(ctx)
}

// servesAPI reports whether the flags give a kubelet API: a serving certificate from
// files, or one requested from the cluster for a port.
func (o *Options) servesAPI() bool {
	return o.TLSCertFile != "" || (o.RotateServerCertificates && o.Port > 0)
}

// cgroupDriver is --cgroup-driver parsed.
func (o *Options) cgroupDriver() (cm.CgroupDriver, error) {
	driver, err := cm.ParseCgroupDriver(o.CgroupDriver)
	if err != nil {
		return "", fmt.Errorf("--cgroup-driver: %w", err)
	}
	return driver, nil
}

// containerLogMaxSize is --container-log-max-size in bytes, > 0.
func (o *Options) containerLogMaxSize() (int64, error) {
	q, err := resource.ParseQuantity(o.ContainerLogMaxSize)
	if err != nil || q.Value() <= 0 {
		return 0, fmt.Errorf("--container-log-max-size %q: want a positive quantity such as 10Mi", o.ContainerLogMaxSize)
	}
	return q.Value(), nil
}

// evictionHard is --eviction-hard parsed.
func (o *Options) evictionHard() ([]eviction.Threshold, error) {
	thresholds, err := eviction.ParseThresholds(o.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("--eviction-hard: %w", err)
	}
	return thresholds, nil
}

// splitList splits a comma-separated flag value, dropping empty items and spaces
// around the others; nil for "".
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
