// Package allinone runs every skiff service in one process: an embedded etcd, the
// apiserver, the scheduler, the controller manager, a built-in CRI runtime and one
// kubelet. Each still talks to
// the others over the wire it always uses (HTTP to the apiserver, gRPC on a unix socket
// to the runtime), so the all-in-one exercises exactly the paths of the full stack.
package allinone

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controllermanager"
	"skiff.dev/services/cri"
	"skiff.dev/services/cri/containerd"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/embedetcd"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/certificate"
	"skiff.dev/services/kubelet/hollow"
	"skiff.dev/services/kubelet/volumemanager"
	"skiff.dev/services/proxy"
	"skiff.dev/services/scheduler"
)

// Runtime names a built-in CRI runtime.
type Runtime string

// The built-in runtimes.
const (
	RuntimeProcess Runtime = "process"
	RuntimeSim     Runtime = "sim"
	// RuntimeContainerd runs real containers: a private containerd the
	// all-in-one starts (package runtime/containerd), or the one at
	// Config.RuntimeEndpoint.
	RuntimeContainerd Runtime = "containerd"
)

// DefaultPodCIDR is the all-in-one node's pod range while no
// controller-manager allocates one (the first /24 of kube's 10.244.0.0/16).
const DefaultPodCIDR = "10.244.0.0/24"

// Config is what the all-in-one runs.
type Config struct {
	// DataDir holds etcd's data, the runtime's and kubelet's state and the admin
	// kubeconfig; created if missing.
	DataDir string
	// BindAddress is the address every listener binds, e.g. "127.0.0.1".
	BindAddress string
	// APIServerPort is the apiserver's port (6443); 0 picks a free one.
	APIServerPort int
	// EtcdPort is the embedded etcd's client port (2379); 0 picks a free one.
	EtcdPort int
	// Runtime is the CRI runtime the kubelet uses.
	Runtime Runtime
	// RuntimeEndpoint, with RuntimeContainerd, is a containerd the user runs
	// ("unix:///run/containerd/containerd.sock" or "tcp://host:port"); ""
	// starts a private one under <DataDir>/containerd.
	RuntimeEndpoint string
	// SandboxImage is the private containerd's pod sandbox (pause) image;
	// "" means containerd.DefaultSandboxImage.
	SandboxImage string
	// PodCIDR is the node's pod range while its spec.podCIDR is empty (the
	// kubelet's --pod-cidr); "" means DefaultPodCIDR.
	PodCIDR string
	// NodeName is the kubelet's node; "" means the host name.
	NodeName string
	// ManualCSRApproval turns csr-signer's auto-approval off: every
	// CertificateSigningRequest waits for `kubectl certificate approve`.
	ManualCSRApproval bool
	// ExecProxyPort is exec-proxy's port (10443); 0 picks a free one.
	ExecProxyPort int
	// KubeletPort is the kubelet API's port (10250); 0 picks a free one.
	KubeletPort int
	// NATSPort is the embedded NATS server's client port (4222) events travel through;
	// 0 picks a free one; -1 runs no NATS, and components POST their events instead.
	NATSPort int
	// ControllerManager are the in-process controller manager's options; zero value:
	// controllermanager.DefaultOptions().
	ControllerManager controllermanager.Options
	// EtcdCompactionInterval is how often the apiserver compacts etcd's history
	// (apiserver.Config's); 0 means etcd3.DefaultCompactionInterval, < 0 never.
	EtcdCompactionInterval time.Duration
	// HollowNodes is how many hollow nodes (package kubelet/hollow: real kubelets over
	// simulated runtimes, named hollow-0, hollow-1, ...) join besides the kubelet; 0 runs none.
	HollowNodes int
	// NoProxy runs no proxy (package proxy, kube-proxy's nftables mode). By default the
	// proxy programs this host's nftables, where root or CAP_NET_ADMIN and nft allow it;
	// where they do not, the all-in-one logs so and runs without (Services do not forward).
	NoProxy bool
	// ProxyTable is the proxy's nftables table (family ip); "" means proxy.DefaultTable.
	// All-in-ones side by side on one host each need their own.
	ProxyTable string
	// CoreDNS is the coredns binary to run as the cluster's DNS (FindCoreDNS finds
	// bin/coredns beside skiff); "" runs none. CoreDNS listens on BindAddress at
	// CoreDNSPort and is published as kube-system/kube-dns (ClusterIP
	// KubeDNSServiceIP, port 53 → CoreDNSPort, endpoints the node's address).
	CoreDNS string
	// CoreDNSPort is CoreDNS's port (UDP and TCP); 0 picks a free one.
	CoreDNSPort int
	// ClusterDNS are the kubelet's --cluster-dns servers, written into ClusterFirst
	// pods' resolv.conf; nil means the kube-dns Service's ClusterIP when CoreDNS runs,
	// and none (pods get the node's resolvers) when it does not.
	ClusterDNS []string
	// TraceExporter, when set, receives every service's spans (tests use
	// tracetest.InMemoryExporter); otherwise spans go over OTLP when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, and nowhere when it is not.
	TraceExporter sdktrace.SpanExporter
}

// Cluster is a running all-in-one.
type Cluster struct {
	// Kubeconfig is the absolute path of the admin kubeconfig.
	Kubeconfig string
	// APIServerURL is the apiserver's base URL.
	APIServerURL string
	// NATSURL is the embedded NATS server's URL; "" when it runs without NATS.
	NATSURL string
	// StaticPodPath is the kubelet's static pod directory, <data-dir>/manifests:
	// a Pod manifest dropped there runs on the node and shows as a mirror pod.
	StaticPodPath string
	// DNSAddress is the host:port CoreDNS answers on (UDP and TCP); "" when no
	// CoreDNS runs.
	DNSAddress string
}

// Start brings every service up and returns once the apiserver serves; the services run
// until ctx ends, and wait returns when all of them have stopped. Errors: an unusable
// data directory, a port in use, an unknown runtime.
func Start(ctx context.Context, cfg Config) (cluster *Cluster, wait func() error, err error) {
	if cfg.Runtime != RuntimeProcess && cfg.Runtime != RuntimeSim && cfg.Runtime != RuntimeContainerd {
		return nil, nil, fmt.Errorf("unknown runtime %q: want %q, %q or %q", cfg.Runtime, RuntimeProcess, RuntimeSim, RuntimeContainerd)
	}
	if cfg.RuntimeEndpoint != "" && cfg.Runtime != RuntimeContainerd {
		return nil, nil, fmt.Errorf("a runtime endpoint is for runtime %q only", RuntimeContainerd)
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.NodeName == "" {
		if cfg.NodeName, err = os.Hostname(); err != nil {
			return nil, nil, fmt.Errorf("node name: %w", err)
		}
	}

	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()

	l, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.APIServerPort)))
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver listen: %w", err)
	}
	stops = append(stops, func() { _ = l.Close() })
	apiURL := "https://" + l.Addr().String()
	// The PKI is made once and kept: restarts reuse the CA and every identity.
	pkiDir := filepath.Join(dataDir, "pki")
	// Its serving certificates also name the address every listener binds, which a
	// kubelet on another host dials (not 0.0.0.0: nobody dials that).
	var hosts []string
	if ip, err := netip.ParseAddr(cfg.BindAddress); err != nil || !ip.IsUnspecified() {
		hosts = []string{cfg.BindAddress}
	}
	if _, err := pki.Init(pki.InitOptions{Dir: pkiDir, APIServerURL: apiURL, Hosts: hosts, TokenTTL: pki.DefaultBootstrapTokenTTL}); err != nil {
		return nil, nil, err
	}
	ca, err := pki.LoadCA(pkiDir)
	if err != nil {
		return nil, nil, err
	}

	// etcd requires mutual TLS: only the apiserver's etcd client certificate gets in.
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir:       filepath.Join(dataDir, "etcd"),
		ClientURL: "https://" + net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.EtcdPort)),
		PKIDir:    pkiDir,
	})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, etcd.Close)
	obs, err := startObservability(ctx, cfg, dataDir, pkiDir)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, obs.stop)
	// The apiserver reaches its embedded etcd by function calls, not over loopback gRPC
	// with mutual TLS (a third of the all-in-one's CPU at load); etcd still listens with
	// mutual TLS for anything outside the process.
	etcdClient := etcd.InProcessClient(obs.apiserver)
	stops = append(stops, func() { _ = etcdClient.Close() })
	apiConfig, err := apiserver.ConfigFromPKI(pkiDir, etcdClient)
	if err != nil {
		return nil, nil, err
	}
	apiConfig.NATSURL, apiConfig.TracerProvider = obs.natsURL, obs.apiserver
	if cfg.EtcdCompactionInterval != 0 {
		apiConfig.EtcdCompactionInterval = max(cfg.EtcdCompactionInterval, 0)
	}
	apiConfig.NATSTLS = obs.natsTLS(apiConfig.NATSTLS)
	// The kubernetes Service points at the address the apiserver binds, as
	// kube-apiserver's --advertise-address defaults to its --bind-address; an
	// unspecified or loopback one (which Endpoints may not hold) leaves the choice to
	// the apiserver: the default-route address.
	if ip := net.ParseIP(cfg.BindAddress); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		apiConfig.AdvertiseAddress = ip
	}
	// exec, attach, port-forward and logs: apiserver → exec-proxy → kubelet.
	streams, err := listenExecProxy(pkiDir, ca, cfg.BindAddress, cfg.ExecProxyPort)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = streams.listener.Close() })
	apiConfig.ExecProxyURL = streams.URL // ConfigFromPKI set ProxyClientTLS
	api, err := apiserver.New(apiConfig)
	if err != nil {
		return nil, nil, err
	}
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	if err := writeKubeconfig(kubeconfig, apiURL, pkiDir); err != nil {
		return nil, nil, err
	}
	// clientConfig reaches the apiserver as one of pki's identities, with no client-side
	// rate limit (QPS < 0): in one process the apiserver is the only judge of load, and a
	// token bucket on the scheduler's binds or the kubelet's status writes only queues
	// work the apiserver could take (docs/performance.md).
	clientConfig := func(id pki.Identity) *rest.Config {
		certFile, keyFile := pki.KeyPairFiles(pkiDir, id.Name)
		return &rest.Config{Host: apiURL, QPS: -1, UserAgent: "skiff-" + id.Name,
			TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(pkiDir, pki.CACertFile), CertFile: certFile, KeyFile: keyFile}}
	}

	runCtx, cancel := context.WithCancel(ctx)
	stops = append(stops, cancel)
	var wg sync.WaitGroup
	errs := make(chan error, 16) // one per service, with room to spare
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				slog.Error("service stopped", "service", name, "err", err)
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel() // one service failing stops the all-in-one
			}
		}()
	}
	run("apiserver", func(ctx context.Context) error { return api.Serve(ctx, l) })
	if err := api.EnsureSystemNamespaces(runCtx); err != nil {
		return nil, nil, err
	}
	if err := api.WaitForBootstrapPolicy(runCtx); err != nil {
		return nil, nil, err
	}

	client, err := kubernetes.NewForConfig(traced(clientConfig(pki.Scheduler), obs.scheduler))
	if err != nil {
		return nil, nil, err
	}
	schedCert, schedKey := pki.KeyPairFiles(pkiDir, pki.Scheduler.Name)
	schedEvents, err := obs.recorder(scheduler.DefaultSchedulerName, "", client, schedCert, schedKey)
	if err != nil {
		return nil, nil, err
	}
	run("scheduler-events", schedEvents.Run)

	sched, err := scheduler.New(scheduler.Config{Client: client, Recorder: schedEvents, TracerProvider: obs.scheduler})
	if err != nil {
		return nil, nil, err
	}
	run("scheduler", sched.Run)

	// The controller manager runs alone here, so it elects no leader.
	cmConfig := traced(clientConfig(pki.ControllerManager), obs.controllerManager)
	cmClient, err := kubernetes.NewForConfig(cmConfig)
	if err != nil {
		return nil, nil, err
	}
	cmCert, cmKey := pki.KeyPairFiles(pkiDir, pki.ControllerManager.Name)
	// Each controller reports its events under its own kube component name through
	// this one recorder (controllermanager.EventRecorders).
	cmEvents, err := obs.recorder("kube-controller-manager", "", cmClient, cmCert, cmKey)
	if err != nil {
		return nil, nil, err
	}
	run("controller-manager-events", cmEvents.Run)
	cm, err := controllermanager.New(controllermanager.Config{Client: cmClient, RESTConfig: cmConfig, RootCA: ca.CertPEM, Events: cmEvents,
		Options: cfg.ControllerManager, TracerProvider: obs.controllerManager})
	if err != nil {
		return nil, nil, err
	}
	run("controller-manager", cm.Run)

	// csr-signer approves and signs kubelet certificates with the cluster CA.
	signerClient, err := kubernetes.NewForConfig(clientConfig(pki.CSRSigner))
	if err != nil {
		return nil, nil, err
	}
	signerCert, signerKey := pki.KeyPairFiles(pkiDir, pki.CSRSigner.Name)
	signerEvents, err := obs.recorder("csr-signer", "", signerClient, signerCert, signerKey)
	if err != nil {
		return nil, nil, err
	}
	run("csr-signer-events", signerEvents.Run)
	signer, err := csrsigner.New(csrsigner.Config{Client: signerClient, CA: ca, AutoApprove: !cfg.ManualCSRApproval, ApproveKubeletServing: true, ControlPlaneHosts: []string{cfg.BindAddress}, Recorder: signerEvents})
	if err != nil {
		return nil, nil, err
	}
	run("csr-signer", signer.Run)

	execProxyClient, err := kubernetes.NewForConfig(clientConfig(pki.ExecProxy))
	if err != nil {
		return nil, nil, err
	}
	serveExecProxy, err := streams.execProxy(execProxyClient)
	if err != nil {
		return nil, nil, err
	}
	run("exec-proxy", serveExecProxy)

	kubeletAddr, nodeIP := kubeletServer(cfg.BindAddress, cfg.KubeletPort)
	clusterDNS, dnsAddress, err := startCoreDNS(runCtx, cfg, run, dataDir, pkiDir, apiURL, nodeIP, clientConfig(pki.Admin))
	if err != nil {
		return nil, nil, err
	}

	socket := filepath.Join(dataDir, "run", string(cfg.Runtime)+".sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, nil, err
	}
	runtimeEndpoint := "unix://" + socket
	switch cfg.Runtime {
	case RuntimeContainerd:
		if cfg.RuntimeEndpoint != "" {
			runtimeEndpoint = cfg.RuntimeEndpoint
			break
		}
		d, err := containerd.Start(ctx, containerd.Config{Dir: filepath.Join(dataDir, "containerd"), SandboxImage: cfg.SandboxImage})
		if err != nil {
			return nil, nil, err
		}
		// Stopped after the kubelet (stops run in reverse): its pods,
		// shims, mounts and bridge go with it.
		stops = append(stops, d.Stop)
		runtimeEndpoint = d.Endpoint()
	case RuntimeProcess:
		rt, err := process.New(filepath.Join(dataDir, "runtime"))
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, rt.Close)
		run("runtime", func(ctx context.Context) error { return cri.Serve(ctx, socket, rt, rt) })
	case RuntimeSim:
		rt := sim.New()
		stops = append(stops, rt.Close)
		run("runtime", func(ctx context.Context) error { return cri.Serve(ctx, socket, rt, rt) })
	}

	// The kubelet joins as any other would: with only the bootstrap kubeconfig it asks for
	// its client certificate (system:node:<name>) through a CertificateSigningRequest, and
	// for its serving certificate the same way, unless the all-in-one issued them (below).
	// With manual approval it waits here, in the background, for `kubectl certificate
	// approve`.
	kubeletDir := filepath.Join(dataDir, "kubelet")
	staticPodPath := filepath.Join(dataDir, "manifests")
	if err := os.MkdirAll(staticPodPath, 0o755); err != nil {
		return nil, nil, err
	}
	// Stopping stops every container (the runtime's Close, run after this), so the
	// tmpfs volumes of their pods are taken down too rather than left mounted in the
	// data directory.
	stops = append(stops, func() { _ = volumemanager.UnmountAll(filepath.Join(kubeletDir, "pods")) })
	// The kubeconfig a restart reuses names this start's apiserver URL; a new port makes
	// it stale, and the kubelet bootstraps again.
	if err := dropStaleKubeconfig(filepath.Join(kubeletDir, "kubelet.kubeconfig"), apiURL); err != nil {
		return nil, nil, err
	}
	// Each start hands out a bootstrap token valid for a while yet, dropping expired ones,
	// to its kubelet, its hollow nodes and, in the PKI directory, to kubelets joining
	// from elsewhere.
	tokenFile := filepath.Join(pkiDir, pki.BootstrapTokenFile)
	bootstrapToken, err := pki.EnsureBootstrapToken(tokenFile, pki.DefaultBootstrapTokenTTL, bootstrapTokenMinValid)
	if err != nil {
		return nil, nil, err
	}
	warnEternalTokens(tokenFile)
	bootstrapKubeconfig := filepath.Join(kubeletDir, pki.BootstrapKubeconfigFile)
	for _, path := range []string{bootstrapKubeconfig, filepath.Join(pkiDir, pki.BootstrapKubeconfigFile)} {
		if err := writeBootstrapKubeconfig(path, apiURL, ca.CertPEM, bootstrapToken); err != nil {
			return nil, nil, err
		}
	}
	// With auto-approval the all-in-one, which holds the CA, issues its own kubelet's
	// client certificate as kubeadm init does for its node (kubelet.conf), instead of a
	// CertificateSigningRequest round trip through csr-signer on every cold start; renewals
	// still go through CSRs. It issues its serving certificate too: the node's address is
	// this host's (loopback by default), which csr-signer approves for no node. With manual
	// approval the kubelet bootstraps, so both requests wait for `kubectl certificate
	// approve` as documented.
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: cfg.NodeName}}
	if !cfg.ManualCSRApproval {
		if _, err := certificate.WriteIssuedClientCert(filepath.Join(kubeletDir, "kubelet.kubeconfig"),
			bootstrapKubeconfig, filepath.Join(kubeletDir, "pki"),
			func() ([]byte, []byte, error) {
				pair, err := ca.IssueClient("system:node:"+cfg.NodeName, []string{"system:nodes"}, 0)
				return pair.CertPEM, pair.KeyPEM, err
			}); err != nil {
			return nil, nil, fmt.Errorf("kubelet client certificate: %w", err)
		}
		if _, err := certificate.WriteIssuedServingCert(filepath.Join(kubeletDir, "pki"), cfg.NodeName, addresses,
			func(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
				_, certPEM, err := ca.Sign(tmpl, pub)
				return certPEM, err
			}); err != nil {
			return nil, nil, fmt.Errorf("kubelet serving certificate: %w", err)
		}
	}
	run("kubelet", func(ctx context.Context) error {
		nodeConfig, _, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
			NodeName:                cfg.NodeName,
			KubeconfigPath:          filepath.Join(kubeletDir, "kubelet.kubeconfig"),
			BootstrapKubeconfigPath: bootstrapKubeconfig,
			CertDir:                 filepath.Join(kubeletDir, "pki"),
			RotateCertificates:      true,
		})
		if err != nil {
			return fmt.Errorf("TLS bootstrap: %w", err)
		}
		// Its client certificate held, the kubelet needs the token no more: it goes,
		// as kubeadm join removes bootstrap-kubelet.conf.
		if err := os.Remove(bootstrapKubeconfig); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		nodeConfig.QPS, nodeConfig.UserAgent = -1, "skiff-kubelet"
		nodeClient, err := kubernetes.NewForConfig(traced(nodeConfig, obs.kubelet))
		if err != nil {
			return err
		}
		// Toward NATS the kubelet is its CSR-issued client certificate, as rotated.
		current := filepath.Join(kubeletDir, "pki", certificate.ClientPairName+"-current.pem")
		kubeletEvents, err := obs.recorder("kubelet", cfg.NodeName, nodeClient, current, current)
		if err != nil {
			return err
		}
		go func() { _ = kubeletEvents.Run(ctx) }()
		kubeletTLS, err := certificate.StartServing(ctx, nodeClient, cfg.NodeName, filepath.Join(kubeletDir, "pki"), addresses, ca.CertPEM)
		if err != nil {
			return err
		}
		kl, err := kubelet.New(kubelet.Config{
			NodeName:        cfg.NodeName,
			Client:          nodeClient,
			RuntimeEndpoint: runtimeEndpoint,
			PodCIDR:         cfg.PodCIDR,
			RootDir:         kubeletDir,
			NodeIP:          nodeIP,
			ServerAddr:      kubeletAddr,
			ServerTLS:       kubeletTLS,
			Recorder:        kubeletEvents,
			TracerProvider:  obs.kubelet,
			PodManifestPath: staticPodPath,
			ClusterDNS:      clusterDNS,
			ClusterDomain:   ClusterDomain,
		})
		if err != nil {
			return err
		}
		return kl.Run(ctx)
	})

	// The proxy, as kube-proxy beside the kubelet: system:kube-proxy programs this
	// host's nftables. Its table goes when the all-in-one stops.
	if !cfg.NoProxy {
		proxyClient, err := kubernetes.NewForConfig(clientConfig(pki.KubeProxy))
		if err != nil {
			return nil, nil, err
		}
		p, err := proxy.New(proxy.Config{Client: proxyClient, NodeName: cfg.NodeName, Table: cfg.ProxyTable, CleanupOnExit: true})
		switch {
		case errors.Is(err, proxy.ErrNoDataplane):
			slog.Warn("running without a proxy: Service ClusterIPs and NodePorts will not forward (run as root, or --proxy=false to silence this)", "err", err)
		case err != nil:
			return nil, nil, err
		default:
			run("proxy", p.Run)
		}
	}

	if cfg.HollowNodes > 0 {
		hollowDir := filepath.Join(dataDir, "hollow")
		for i := range cfg.HollowNodes {
			if err := dropStaleKubeconfig(filepath.Join(hollowDir, hollow.NodeName("", i), "kubelet.kubeconfig"), apiURL); err != nil {
				return nil, nil, err
			}
		}
		hollowBootstrap := filepath.Join(hollowDir, pki.BootstrapKubeconfigFile)
		if err := writeBootstrapKubeconfig(hollowBootstrap, apiURL, ca.CertPEM, bootstrapToken); err != nil {
			return nil, nil, err
		}
		run("hollow-nodes", func(ctx context.Context) error {
			return hollow.Run(ctx, hollow.Config{Nodes: cfg.HollowNodes, BootstrapKubeconfig: hollowBootstrap,
				RootDir: hollowDir, NodeIP: nodeIP, TracerProvider: obs.kubelet,
				// Their events go through NATS as the kubelet's do (POSTed when NATS is off).
				NATSURL: obs.natsURL, NATSCA: obs.caPEM, NATSServerName: natsServerName})
		})
	}

	wait = func() error {
		wg.Wait()
		cleanup()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return errors.Join(all...)
	}
	return &Cluster{Kubeconfig: kubeconfig, APIServerURL: apiURL, NATSURL: obs.natsURL, StaticPodPath: staticPodPath, DNSAddress: dnsAddress}, wait, nil
}

// writeKubeconfig writes the admin kubeconfig for apiURL with the CA and the admin's
// certificate from pkiDir embedded, replacing an older one (the port may have changed).
func writeKubeconfig(path, apiURL, pkiDir string) error {
	ca, err := os.ReadFile(filepath.Join(pkiDir, pki.CACertFile))
	if err != nil {
		return err
	}
	certFile, keyFile := pki.KeyPairFiles(pkiDir, pki.Admin.Name)
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	data, err := pki.Kubeconfig(apiURL, ca, pki.Admin.CommonName, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// startupTimeout bounds how long callers should wait for the node to register.
const startupTimeout = 60 * time.Second

// warnEternalTokens logs each bootstrap token of path that never expires (a data
// directory of an older skiff has one): whoever holds it may join a node under any
// name, for ever.
func warnEternalTokens(path string) {
	tokens, err := pki.ReadBootstrapTokens(path)
	if err != nil {
		return
	}
	for _, t := range tokens {
		if t.Expiration.IsZero() {
			slog.Warn("a bootstrap token never expires: whoever holds it may join a node under any name; delete its line to revoke it",
				"id", t.ID, "file", path)
		}
	}
}

// bootstrapTokenMinValid is how long the token handed out at a start stays valid at
// least: the kubelet's wait for its first certificate (an hour, for a person to approve).
const bootstrapTokenMinValid = time.Hour

// writeBootstrapKubeconfig writes a kubelet's bootstrap kubeconfig for apiURL: the CA
// (PEM) and token.
func writeBootstrapKubeconfig(path, apiURL string, caPEM []byte, token pki.BootstrapToken) error {
	data, err := pki.Kubeconfig(apiURL, caPEM, "kubelet-bootstrap", &clientcmdapi.AuthInfo{Token: token.String()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}

// dropStaleKubeconfig removes the kubelet's kubeconfig when it names another apiserver
// URL than apiURL (the all-in-one started on another port), so the kubelet bootstraps
// again instead of dialing a dead address.
func dropStaleKubeconfig(path, apiURL string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
			if cluster, ok := cfg.Clusters[ctx.Cluster]; ok && cluster.Server == apiURL {
				return nil
			}
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
