// Command kubelet runs skiff's node agent against an API server and a CRI
// runtime.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/certificate"
	"skiff.dev/services/kubelet/cm"
	"skiff.dev/services/kubelet/eviction"
	"skiff.dev/services/kubelet/hollow"
	"skiff.dev/services/kubelet/nodestatus"
	"skiff.dev/services/tunnel"
)

func main() {
	hostname, _ := os.Hostname()
	nodeName := flag.String("node-name", strings.ToLower(hostname), "name of the Node object this kubelet registers")
	kubeconfig := flag.String("kubeconfig", "", "path to the kubelet's kubeconfig, written by the TLS bootstrap when --bootstrap-kubeconfig is set; empty uses the in-cluster configuration")
	bootstrapKubeconfig := flag.String("bootstrap-kubeconfig", "", "kubeconfig with a bootstrap token, used to request a client certificate (CSR) when --kubeconfig is missing or expired")
	certDir := flag.String("cert-dir", "", "directory of the kubelet's key pairs (kubelet-client-current.pem, kubelet-server-current.pem); empty means <root-dir>/pki")
	rotateCertificates := flag.Bool("rotate-certificates", true, "renew the client certificate through a new CertificateSigningRequest before it expires")
	rotateServerCertificates := flag.Bool("rotate-server-certificates", true, "without --tls-cert-file, request the kubelet API's serving certificate from the cluster (signer kubernetes.io/kubelet-serving) and renew it")
	endpoint := flag.String("container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI runtime endpoint: unix:///path (or a path) or tcp://host:port (plain gRPC: a trusted network only)")
	podCIDR := flag.String("pod-cidr", "", "pod IP range used while the Node's spec.podCIDR is empty (no controller-manager allocating ranges); the Node's wins when set")
	cgroupDriver := flag.String("cgroup-driver", string(cm.CgroupDriverCgroupfs), "how pods' cgroups are named: cgroupfs or systemd; the runtime's answer to CRI RuntimeConfig wins when it gives one (kube's KubeletCgroupDriverFromCRI)")
	clusterDNS := flag.String("cluster-dns", "", "comma-separated cluster DNS server IPs for dnsPolicy ClusterFirst pods; empty gives them the node's resolver")
	clusterDomain := flag.String("cluster-domain", "cluster.local", "the cluster's DNS domain, in ClusterFirst pods' search path")
	containerLogMaxSize := flag.String("container-log-max-size", "10Mi", "size past which a running container's log file is rotated (a quantity: 10Mi, 1Gi)")
	containerLogMaxFiles := flag.Int("container-log-max-files", 5, "log files kept per container, the live one included (at least 2)")
	resolvConf := flag.String("resolv-conf", "/etc/resolv.conf", "the node's resolver config, the base of dnsPolicy Default")
	rootDir := flag.String("root-dir", kubelet.DefaultRootDir, "directory for kubelet state and pod logs")
	nodeIP := flag.String("node-ip", "", "IP address reported for the node; empty picks the first non-loopback IPv4")
	address := flag.String("address", "0.0.0.0", "address the kubelet API (exec, attach, port-forward, logs) listens on")
	port := flag.Int("port", kubelet.KubeletPort, "kubelet API HTTPS port")
	tlsCertFile := flag.String("tls-cert-file", "", "kubelet API serving certificate; empty serves no kubelet API")
	tlsKeyFile := flag.String("tls-private-key-file", "", "kubelet API serving key")
	clientCAFile := flag.String("client-ca-file", "", "cluster CA verifying the kubelet API's clients (exec-proxy, system:masters); empty means the CA of --kubeconfig")
	natsURL := flag.String("nats-url", "", "NATS URL events are published to (JetStream stream EVENTS); \"\" POSTs them to the apiserver")
	natsCAFile := flag.String("nats-ca-file", "", "CA verifying NATS's serving certificate (default: --client-ca-file, else the CA of --kubeconfig)")
	natsCertFile := flag.String("nats-cert-file", "", "client certificate toward NATS, which requires mutual TLS; read at every connect, so a rotated one is used (default: <cert-dir>/kubelet-client-current.pem)")
	natsKeyFile := flag.String("nats-key-file", "", "client key toward NATS (default: the --nats-cert-file file, which then holds both)")
	podManifestPath := flag.String("pod-manifest-path", "", "directory (or file) of static pod manifests the kubelet runs on its own and mirrors into the API server; empty means none")
	fileCheckFrequency := flag.Duration("file-check-frequency", 20*time.Second, "how often --pod-manifest-path is read again")
	evictionHard := flag.String("eviction-hard", eviction.DefaultEvictionHard, "thresholds (signal<quantity or percentage, comma-separated; signals memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available) below which the node reports MemoryPressure, DiskPressure or PIDPressure; pods are not evicted")
	eventedPLEG := flag.Bool("evented-pleg", true, "read the runtime's container events (CRI GetContainerEvents) and relist it only every 5 min, as kube's EventedPLEG feature gate does; false, or a runtime without the event stream (containerd before 1.7), relists every second")
	allowedUnsafeSysctls := flag.String("allowed-unsafe-sysctls", "", "comma-separated sysctls (or prefixes ending in *, e.g. 'net.core.*') pods may set besides kube's safe ones; a pod asking for another is rejected (SysctlForbidden)")
	hollowNodes := flag.Int("hollow-nodes", 0, "run this many hollow nodes (kubemark's) instead of one kubelet: each the real kubelet over its own simulated runtime, joining through --bootstrap-kubeconfig, with its state under <root-dir>/<name>; no kubelet API")
	hollowNamePrefix := flag.String("hollow-name-prefix", hollow.DefaultNamePrefix, "with --hollow-nodes, the nodes' names are this prefix followed by 0, 1, ...")
	srv := serving.NewOptions("")
	srv.AddFlags(flag.CommandLine)
	// The flag compose.yaml and earlier releases use: the same as --health-address.
	flag.StringVar(&srv.HealthAddress, "healthz-addr", "", "deprecated: use --health-address")
	tunnelServer := flag.String("tunnel-server", "", "exec-proxy's tunnel address (host:port, port 10444): the kubelet dials out and holds a tunnel there, through which exec-proxy reaches its kubelet API when it cannot route to the node's address (as konnectivity's agent); empty means none")
	tunnelCAFile := flag.String("tunnel-ca-file", "", "CA verifying exec-proxy's tunnel certificate (default: --client-ca-file, else the CA of --kubeconfig)")
	tunnelCertFile := flag.String("tunnel-cert-file", "", "the node's client certificate toward exec-proxy's tunnel, system:node:<node-name>; read at every connect, so a rotated one is used (default: <cert-dir>/kubelet-client-current.pem, which also holds the key)")
	tunnelKeyFile := flag.String("tunnel-key-file", "", "its key (default: the --tunnel-cert-file file)")
	tunnelServerName := flag.String("tunnel-server-name", "", "the name exec-proxy's tunnel certificate must carry, where --tunnel-server is a relay's address (default: the host of --tunnel-server)")
	contentType := kubeclient.AddContentTypeFlag(flag.CommandLine)
	apiQPS := flag.Float64("kube-api-qps", 50, "requests per second to the apiserver (kubelet's --kube-api-qps; client-go's own default is 5)")
	apiBurst := flag.Int("kube-api-burst", 100, "burst of requests to the apiserver (kubelet's --kube-api-burst)")
	flag.Parse()
	driver, err := cm.ParseCgroupDriver(*cgroupDriver)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet: --cgroup-driver: %v\n", err)
		os.Exit(2)
	}

	logger := srv.Logger("kubelet")
	logMaxSize, err := resource.ParseQuantity(*containerLogMaxSize)
	if err != nil || logMaxSize.Value() <= 0 {
		logger.Error("--container-log-max-size: want a positive quantity such as 10Mi", "value", *containerLogMaxSize, "err", err)
		os.Exit(2)
	}
	// The TLS bootstrap may wait for a person to approve the kubelet's CSR: a signal
	// must end that wait too.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *hollowNodes > 0 {
		if _, err := srv.Start(ctx, serving.NewRegistry()); err != nil {
			logger.Error("health endpoints", "err", err)
			os.Exit(1)
		}
		cfg := hollow.Config{Nodes: *hollowNodes, NamePrefix: *hollowNamePrefix, BootstrapKubeconfig: *bootstrapKubeconfig,
			RootDir: *rootDir, NodeIP: *nodeIP, GenericPLEG: !*eventedPLEG, NATSURL: *natsURL, Logger: logger}
		if *natsURL != "" {
			// Each node presents its own client certificate (--nats-cert-file does not
			// apply); NATS is verified with --nats-ca-file, else the cluster's CA.
			if cfg.NATSCA, err = pki.ReadCA(*bootstrapKubeconfig, *natsCAFile, *clientCAFile); err != nil {
				logger.Error("NATS CA", "err", err)
				os.Exit(1)
			}
		}
		os.Exit(runHollowNodes(ctx, logger, cfg))
	}
	thresholds, err := eviction.ParseThresholds(*evictionHard)
	if err != nil {
		logger.Error("--eviction-hard", "err", err)
		os.Exit(2)
	}
	if *certDir == "" {
		*certDir = filepath.Join(*rootDir, "pki")
	}
	if *nodeIP == "" {
		// Chosen here so a serving certificate names the address the node reports.
		*nodeIP = nodestatus.DefaultNodeIP()
	}

	var restConfig *rest.Config

	if *kubeconfig != "" && (*bootstrapKubeconfig != "" || *rotateCertificates) {
		restConfig, _, err = certificate.NewClientConfig(ctx, certificate.ClientOptions{
			NodeName: *nodeName, KubeconfigPath: *kubeconfig, BootstrapKubeconfigPath: *bootstrapKubeconfig,
			CertDir: *certDir, RotateCertificates: *rotateCertificates, Logger: logger,
		})
	} else {
		restConfig, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	}
	if err != nil {
		logger.Error("load kubeconfig", "err", err)
		os.Exit(1)
	}
	kubeclient.SetContentType(restConfig, *contentType)
	restConfig.QPS, restConfig.Burst = float32(*apiQPS), *apiBurst
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "kubelet", NodeName: *nodeName})
	if err != nil {
		logger.Error("tracing", "err", err)
		os.Exit(1)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	restConfig.WrapTransport = tracing.WrapTransport(tp)
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		logger.Error("build client", "err", err)
		os.Exit(1)
	}
	var natsTLS *tls.Config
	if *natsURL != "" {
		// Its own client certificate, which client-go's certificate manager keeps
		// current in --cert-dir (read again at every connect), and the cluster CA.
		certFile := orDefault(*natsCertFile, filepath.Join(*certDir, certificate.ClientPairName+"-current.pem"))
		caPEM, err := pki.ReadCA(*kubeconfig, *natsCAFile, *clientCAFile)
		if err == nil {
			natsTLS, err = pki.ReloadingClientTLS(caPEM, certFile, *natsKeyFile)
		}
		if err != nil {
			logger.Error("NATS client TLS", "err", err)
			os.Exit(1)
		}
	}
	// Toward NATS the kubelet is its node, as its certificate says.
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "kubelet", Host: *nodeName, User: "system:node:" + *nodeName,
		NATSURL: *natsURL, TLS: natsTLS, Client: client})
	if err != nil {
		logger.Error("event recorder", "err", err)
		os.Exit(1)
	}
	go func() { _ = recorder.Run(ctx) }()

	var serverAddr string
	var serverTLS *tls.Config
	if *tlsCertFile != "" {
		caPEM, err := pki.ReadCA(*kubeconfig, *clientCAFile)
		if err == nil {
			serverTLS, err = pki.ServingTLS(*tlsCertFile, *tlsKeyFile, caPEM)
		}
		if err != nil {
			logger.Error("kubelet API TLS", "err", err)
			os.Exit(1)
		}
		serverAddr = net.JoinHostPort(*address, strconv.Itoa(*port))
	} else if *rotateServerCertificates && *port > 0 {
		serverTLS, err = servingFromCluster(ctx, client, *nodeName, *nodeIP, *certDir, *clientCAFile, *kubeconfig)
		if err != nil {
			logger.Error("kubelet serving certificate", "err", err)
			os.Exit(1)
		}
		serverAddr = net.JoinHostPort(*address, strconv.Itoa(*port))
	}

	var unsafeSysctls []string
	if *allowedUnsafeSysctls != "" {
		unsafeSysctls = strings.Split(*allowedUnsafeSysctls, ",")
	}
	kl, err := kubelet.New(kubelet.Config{
		AllowedUnsafeSysctls: unsafeSysctls,
		NodeName:             *nodeName,
		Client:               client,
		RuntimeEndpoint:      *endpoint,
		GenericPLEG:          !*eventedPLEG,
		RootDir:              *rootDir,
		EvictionHard:         thresholds,
		NodeIP:               *nodeIP,
		ServerAddr:           serverAddr,
		ServerTLS:            serverTLS,
		Logger:               logger,
		Recorder:             recorder,
		TracerProvider:       tp,

		PodManifestPath:    *podManifestPath,
		FileCheckFrequency: *fileCheckFrequency,
		PodCIDR:            *podCIDR,
		ClusterDNS:         splitList(*clusterDNS),
		CgroupDriver:       driver,
		ClusterDomain:      *clusterDomain,
		ResolverConfig:     *resolvConf,

		ContainerLogMaxSize:  logMaxSize.Value(),
		ContainerLogMaxFiles: *containerLogMaxFiles,
	})
	if err != nil {
		logger.Error("create kubelet", "err", err)
		os.Exit(1)
	}

	if _, err := srv.Start(ctx, serving.NewRegistry(recorder.Metrics()), serving.WithLiveness(kl.Healthz)); err != nil {
		logger.Error("health endpoints", "err", err)
		os.Exit(1)
	}

	if *tunnelServer != "" {
		if kl.ServerAddress() == "" {
			logger.Error("--tunnel-server needs the kubelet API (--tls-cert-file or --rotate-server-certificates), which the tunnel carries")
			os.Exit(2)
		}
		agent, err := tunnelAgent(*tunnelServer, *tunnelServerName, *nodeName, kl.ServerAddress(), *tunnelCAFile, *tunnelCertFile, *tunnelKeyFile, *clientCAFile, *kubeconfig, *certDir, logger)
		if err != nil {
			logger.Error("tunnel agent", "err", err)
			os.Exit(1)
		}
		go func() { _ = agent.Run(ctx) }()
	}

	if err := kl.Run(ctx); err != nil {
		logger.Error("kubelet failed", "err", err)
		os.Exit(1)
	}
}

// runHollowNodes runs cfg's hollow nodes until ctx ends, traced when OTLP is set up,
// and returns the process's exit code.
func runHollowNodes(ctx context.Context, logger *slog.Logger, cfg hollow.Config) int {
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "kubelet"})
	if err != nil {
		logger.Error("tracing", "err", err)
		return 1
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg.TracerProvider = tp
	if err := hollow.Run(ctx, cfg); err != nil {
		logger.Error("hollow nodes failed", "err", err)
		return 1
	}
	return 0
}

// servingFromCluster starts the kubelet API's serving certificate through a CSR for the
// addresses the node reports (InternalIP nodeIP, Hostname nodeName); clients are
// verified against --client-ca-file, or the CA --kubeconfig trusts.
func servingFromCluster(ctx context.Context, client kubernetes.Interface, nodeName, nodeIP, certDir, clientCAFile, kubeconfig string) (*tls.Config, error) {
	caPEM, err := pki.ReadCA(kubeconfig, clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: nodeName}}
	return certificate.StartServing(ctx, client, nodeName, certDir, addresses, caPEM)
}

// tunnelAgent is the kubelet's end of its node-initiated tunnel to exec-proxy at server
// (whose certificate must name serverName, default server's host): its node client
// certificate (default: the one client-go's certificate manager keeps current in certDir)
// and the cluster CA (--tunnel-ca-file, --client-ca-file, or the CA of --kubeconfig); it
// dials the kubelet API at listen (loopback where it listens on every address).
func tunnelAgent(server, serverName, nodeName, listen, caFile, certFile, keyFile, clientCAFile, kubeconfig, certDir string, logger *slog.Logger) (*tunnel.Agent, error) {
	if certFile == "" {
		certFile = filepath.Join(certDir, certificate.ClientPairName+"-current.pem")
	}
	caPEM, err := pki.ReadCA(kubeconfig, caFile, clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA: %w", err)
	}
	tlsConfig, err := tunnel.ClientTLS(caPEM, certFile, keyFile, serverName)
	if err != nil {
		return nil, err
	}
	return tunnel.NewAgent(tunnel.AgentConfig{Server: server, NodeName: nodeName, TLS: tlsConfig,
		KubeletAddress: tunnel.KubeletAddress(listen), Logger: logger})
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// orDefault is value, or def when value is "".
func orDefault(value, def string) string {
	if value == "" {
		return def
	}
	return value
}
