// Package allinone runs every skiff service in one process: an embedded etcd and NATS,
// the apiserver, the scheduler, the controller manager, csr-signer, exec-proxy, a CRI
// runtime, one kubelet and the proxy. Each starts through the Config → Run of its own
// app package, the one its standalone binary runs, and talks to the others over the wire
// it always uses (HTTPS to the apiserver as its own identity, through authentication,
// authorization and admission; gRPC on a unix socket to the runtime). The one shortcut,
// an option (Config.EtcdOverGRPC, --etcd-in-process): the apiserver reaches the
// embedded etcd by function calls (embedetcd.Etcd.InProcessClient) rather than
// loopback gRPC.
package allinone

import (
	"cmp"
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
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"skiff.dev/services/apiserver"
	apiserverapp "skiff.dev/services/apiserver/app"
	"skiff.dev/services/controllermanager"
	controllermanagerapp "skiff.dev/services/controllermanager/app"
	criapp "skiff.dev/services/cri/app"
	"skiff.dev/services/cri/containerd"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/sim"
	csrsignerapp "skiff.dev/services/csrsigner/app"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/embedetcd"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet"
	kubeletapp "skiff.dev/services/kubelet/app"
	"skiff.dev/services/kubelet/certificate"
	"skiff.dev/services/kubelet/hollow"
	"skiff.dev/services/kubelet/volumemanager"
	"skiff.dev/services/proxy"
	proxyapp "skiff.dev/services/proxy/app"
	"skiff.dev/services/scheduler"
	schedulerapp "skiff.dev/services/scheduler/app"
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
	// EtcdOverGRPC makes the apiserver reach the embedded etcd as it reaches a separate
	// one, over gRPC with mutual TLS on loopback. By default it calls the embedded etcd
	// by function calls (embedetcd.Etcd.InProcessClient), the all-in-one's one shortcut:
	// the same etcd server code and the same requests, without the encoding, TLS and
	// HTTP/2 of a connection (a third of the all-in-one's CPU at load).
	EtcdOverGRPC bool
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
//
// Each component starts through its own Config → Run (package <component>/app), the one
// its standalone binary runs, built here from the all-in-one's PKI: every one of them
// reaches the apiserver over HTTPS as its own identity, through authentication,
// authorization and admission, as in the full stack.
func Start(ctx context.Context, cfg Config) (cluster *Cluster, wait func() error, err error) {
	s, err := newStarter(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			s.cancel()
			s.wg.Wait()
			s.cleanup()
		}
	}()
	for _, start := range []func(context.Context) error{
		s.startPKI,               // the CA and every identity, kept across restarts
		s.startEtcd,              // embedded etcd, mutual TLS
		s.startObservability,     // a tracer provider per service, embedded NATS
		s.startAPIServer,         // apiserver (waits for its bootstrap RBAC policy)
		s.startScheduler,         // scheduler, as system:kube-scheduler
		s.startControllerManager, // controller manager, as system:kube-controller-manager
		s.startCSRSigner,         // csr-signer, as system:skiff:csr-signer
		s.startExecProxy,         // exec-proxy, as system:skiff:exec-proxy
		s.startCoreDNS,           // CoreDNS as kube-system/kube-dns, when found
		s.startRuntime,           // the CRI runtime: process, sim or containerd
		s.startKubelet,           // the kubelet, as system:node:<name> after TLS bootstrap
		s.startProxy,             // the proxy, as system:kube-proxy, where nftables allow
		s.startHollowNodes,       // hollow nodes, when asked for
		s.waitForServiceAccount,  // default/default, which admission needs for a first pod
	} {
		if err := start(ctx); err != nil {
			return nil, nil, err
		}
	}
	return &Cluster{Kubeconfig: s.kubeconfig, APIServerURL: s.apiURL, NATSURL: s.obs.natsURL,
		StaticPodPath: s.staticPodPath, DNSAddress: s.dnsAddress}, s.wait, nil
}

// starter is the all-in-one while it starts: what each step leaves for the next, the
// services running, and what stopping undoes.
type starter struct {
	cfg                       Config
	dataDir, pkiDir           string
	ca                        *pki.CA
	apiListener               net.Listener
	apiURL, kubeconfig        string
	etcd                      *embedetcd.Etcd
	obs                       *observability
	streams                   *streams
	kubeletAddr, nodeIP       string
	clusterDNS                []string
	dnsAddress                string
	runtimeEndpoint           string
	staticPodPath, kubeletDir string
	bootstrapToken            pki.BootstrapToken

	runCtx context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
	stops  []func() // undone in reverse order
}

// newStarter checks cfg, fills its defaults and makes the data directory.
func newStarter(ctx context.Context, cfg Config) (*starter, error) {
	if cfg.Runtime != RuntimeProcess && cfg.Runtime != RuntimeSim && cfg.Runtime != RuntimeContainerd {
		return nil, fmt.Errorf("unknown runtime %q: want %q, %q or %q", cfg.Runtime, RuntimeProcess, RuntimeSim, RuntimeContainerd)
	}
	if cfg.RuntimeEndpoint != "" && cfg.Runtime != RuntimeContainerd {
		return nil, fmt.Errorf("a runtime endpoint is for runtime %q only", RuntimeContainerd)
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.NodeName == "" {
		if cfg.NodeName, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("node name: %w", err)
		}
	}
	s := &starter{cfg: cfg, dataDir: dataDir, pkiDir: filepath.Join(dataDir, "pki"),
		errs: make(chan error, 16)} // one per service, with room to spare
	s.runCtx, s.cancel = context.WithCancel(ctx)
	return s, nil
}

// run runs a service until the all-in-one stops; one failing stops them all.
func (s *starter) run(name string, f func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(s.runCtx); err != nil && s.runCtx.Err() == nil {
			slog.Error("service stopped", "service", name, "err", err)
			s.errs <- fmt.Errorf("%s: %w", name, err)
			s.cancel()
		}
	}()
}

// onStop adds f to what stopping undoes, after everything added later.
func (s *starter) onStop(f func()) { s.stops = append(s.stops, f) }

func (s *starter) cleanup() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// wait waits for every service to stop, undoes what starting did, and returns the
// errors of the services that failed.
func (s *starter) wait() error {
	s.wg.Wait()
	s.cancel()
	s.cleanup()
	close(s.errs)
	var all []error
	for err := range s.errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// startPKI listens on the apiserver's port (its URL goes into the certificates'
// kubeconfigs) and makes the PKI once: restarts reuse the CA and every identity. Its
// serving certificates also name the address every listener binds, which a kubelet on
// another host dials (not 0.0.0.0: nobody dials that).
func (s *starter) startPKI(context.Context) error {
	l, err := net.Listen("tcp", net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.APIServerPort)))
	if err != nil {
		return fmt.Errorf("apiserver listen: %w", err)
	}
	s.apiListener, s.apiURL = l, "https://"+l.Addr().String()
	s.onStop(func() { _ = l.Close() })
	var hosts []string
	if ip, err := netip.ParseAddr(s.cfg.BindAddress); err != nil || !ip.IsUnspecified() {
		hosts = []string{s.cfg.BindAddress}
	}
	if _, err := pki.Init(pki.InitOptions{Dir: s.pkiDir, APIServerURL: s.apiURL, Hosts: hosts, TokenTTL: pki.DefaultBootstrapTokenTTL}); err != nil {
		return err
	}
	s.ca, err = pki.LoadCA(s.pkiDir)
	return err
}

// startEtcd starts the embedded etcd, which requires mutual TLS: only the apiserver's
// etcd client certificate gets in.
func (s *starter) startEtcd(ctx context.Context) error {
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir:       filepath.Join(s.dataDir, "etcd"),
		ClientURL: "https://" + net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.EtcdPort)),
		PKIDir:    s.pkiDir,
	})
	if err != nil {
		return err
	}
	s.etcd = etcd
	s.onStop(etcd.Close)
	return nil
}

func (s *starter) startObservability(ctx context.Context) error {
	obs, err := startObservability(ctx, s.cfg, s.dataDir, s.pkiDir)
	if err != nil {
		return err
	}
	s.obs = obs
	s.onStop(obs.stop)
	return nil
}

// startAPIServer serves the API (apiserver/app) and returns once the system namespaces
// and the bootstrap RBAC policy are in place.
func (s *starter) startAPIServer(context.Context) error {
	// Unless asked otherwise (Config.EtcdOverGRPC), the apiserver reaches its embedded
	// etcd by function calls; etcd still listens with mutual TLS for anything outside
	// the process.
	etcdClient := s.etcd.InProcessClient(s.obs.apiserver)
	if s.cfg.EtcdOverGRPC {
		var err error
		if etcdClient, err = s.etcd.Client(tracing.GRPCClientOption(s.obs.apiserver)); err != nil {
			return err
		}
	}
	s.onStop(func() { _ = etcdClient.Close() })
	api, err := apiserver.ConfigFromPKI(s.pkiDir, etcdClient)
	if err != nil {
		return err
	}
	api.NATSURL, api.TracerProvider, api.NATSTLS = s.obs.natsURL, s.obs.apiserver, s.obs.natsTLS(api.NATSTLS)
	if s.cfg.EtcdCompactionInterval != 0 {
		api.EtcdCompactionInterval = max(s.cfg.EtcdCompactionInterval, 0)
	}
	// The kubernetes Service points at the address the apiserver binds, as
	// kube-apiserver's --advertise-address defaults to its --bind-address; an
	// unspecified or loopback one (which Endpoints may not hold) leaves the choice to
	// the apiserver: the default-route address.
	if ip := net.ParseIP(s.cfg.BindAddress); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		api.AdvertiseAddress = ip
	}
	// exec, attach, port-forward and logs: apiserver → exec-proxy → kubelet.
	if s.streams, err = listenExecProxy(s.pkiDir, s.ca, s.cfg.BindAddress, s.cfg.ExecProxyPort); err != nil {
		return err
	}
	s.onStop(func() { _ = s.streams.listener.Close() })
	api.ExecProxyURL = s.streams.URL // ConfigFromPKI set ProxyClientTLS
	server, err := (&apiserverapp.Config{API: api, Listener: s.apiListener}).New()
	if err != nil {
		return err
	}
	s.kubeconfig = filepath.Join(s.dataDir, "admin.kubeconfig")
	if err := writeKubeconfig(s.kubeconfig, s.apiURL, s.pkiDir); err != nil {
		return err
	}
	s.run("apiserver", server.Run)
	if err := server.API.EnsureSystemNamespaces(s.runCtx); err != nil {
		return err
	}
	return server.API.WaitForBootstrapPolicy(s.runCtx)
}

// client is the clientset of the component pki identity id, traced by tp, with its
// configuration.
func (s *starter) client(id pki.Identity, tp trace.TracerProvider) (kubernetes.Interface, *rest.Config, error) {
	restConfig := componentRESTConfig(s.apiURL, s.pkiDir, id, tp)
	client, err := kubernetes.NewForConfig(restConfig)
	return client, restConfig, err
}

// componentRESTConfig reaches the apiserver at apiURL as the pki identity id of pkiDir,
// over HTTPS with its client certificate, traced by tp (nil: not traced), with no
// client-side rate limit (QPS < 0): in one process the apiserver is the only judge of
// load, and a token bucket on the scheduler's binds or the kubelet's status writes only
// queues work the apiserver could take (docs/performance.md).
func componentRESTConfig(apiURL, pkiDir string, id pki.Identity, tp trace.TracerProvider) *rest.Config {
	certFile, keyFile := pki.KeyPairFiles(pkiDir, id.Name)
	restConfig := &rest.Config{Host: apiURL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(pkiDir, pki.CACertFile), CertFile: certFile, KeyFile: keyFile}}
	opts := componentbase.NewClientOptions(-1, 0)
	opts.Complete(restConfig, tp, "skiff-"+id.Name)
	return restConfig
}

// componentRecorder is the event recorder of component, as the pki identity id: over
// NATS with id's client certificate, or POSTed through client when NATS is off.
func (s *starter) componentRecorder(component string, id pki.Identity, client kubernetes.Interface) (*eventrecorder.Recorder, error) {
	certFile, keyFile := pki.KeyPairFiles(s.pkiDir, id.Name)
	return s.obs.recorder(component, "", client, certFile, keyFile)
}

// startScheduler runs the scheduler (scheduler/app), alone: no leader election.
func (s *starter) startScheduler(context.Context) error {
	client, restConfig, err := s.client(pki.Scheduler, s.obs.scheduler)
	if err != nil {
		return err
	}
	recorder, err := s.componentRecorder(scheduler.DefaultSchedulerName, pki.Scheduler, client)
	if err != nil {
		return err
	}
	app := &schedulerapp.Config{Client: client, RESTConfig: restConfig, Recorder: recorder, TracerProvider: s.obs.scheduler}
	s.run("scheduler", app.Run)
	return nil
}

// startControllerManager runs the controller manager (controllermanager/app), alone: no
// leader election. Each controller reports its events under its own kube component
// name through one recorder.
func (s *starter) startControllerManager(context.Context) error {
	client, restConfig, err := s.client(pki.ControllerManager, s.obs.controllerManager)
	if err != nil {
		return err
	}
	recorder, err := s.componentRecorder("kube-controller-manager", pki.ControllerManager, client)
	if err != nil {
		return err
	}
	app := &controllermanagerapp.Config{Client: client, RESTConfig: restConfig, RootCA: s.ca.CertPEM, Recorder: recorder,
		TracerProvider: s.obs.controllerManager, ControllerManager: s.cfg.ControllerManager}
	s.run("controller-manager", app.Run)
	return nil
}

// startCSRSigner runs csr-signer (csrsigner/app), which approves and signs kubelet
// certificates with the cluster CA.
func (s *starter) startCSRSigner(context.Context) error {
	client, _, err := s.client(pki.CSRSigner, nil)
	if err != nil {
		return err
	}
	recorder, err := s.componentRecorder("csr-signer", pki.CSRSigner, client)
	if err != nil {
		return err
	}
	app := &csrsignerapp.Config{Client: client, CA: s.ca, AutoApprove: !s.cfg.ManualCSRApproval, ApproveKubeletServing: true,
		ControlPlaneHosts: []string{s.cfg.BindAddress}, Recorder: recorder}
	s.run("csr-signer", app.Run)
	return nil
}

// startExecProxy runs exec-proxy (execproxy/app) on the listener startAPIServer opened.
func (s *starter) startExecProxy(context.Context) error {
	client, _, err := s.client(pki.ExecProxy, nil)
	if err != nil {
		return err
	}
	app, err := s.streams.execProxy(client)
	if err != nil {
		return err
	}
	s.run("exec-proxy", app.Run)
	return nil
}

// startCoreDNS runs CoreDNS, when cfg.CoreDNS names it, as kube-system/kube-dns.
func (s *starter) startCoreDNS(ctx context.Context) (err error) {
	s.kubeletAddr, s.nodeIP = kubeletServer(s.cfg.BindAddress, s.cfg.KubeletPort)
	s.clusterDNS, s.dnsAddress, err = startCoreDNS(s.runCtx, s.cfg, s.run, s.dataDir, s.pkiDir, s.apiURL, s.nodeIP,
		componentRESTConfig(s.apiURL, s.pkiDir, pki.Admin, nil))
	return err
}

// startRuntime starts the node's CRI runtime: a built-in one served on a unix socket
// (cri/app), or containerd, private or the user's.
func (s *starter) startRuntime(ctx context.Context) error {
	socket := filepath.Join(s.dataDir, "run", string(s.cfg.Runtime)+".sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return err
	}
	s.runtimeEndpoint = "unix://" + socket
	var rt criapp.Runtime
	switch {
	case s.cfg.Runtime == RuntimeContainerd && s.cfg.RuntimeEndpoint != "":
		s.runtimeEndpoint = s.cfg.RuntimeEndpoint
		return nil
	case s.cfg.Runtime == RuntimeContainerd:
		d, err := containerd.Start(ctx, containerd.Config{Dir: filepath.Join(s.dataDir, "containerd"), SandboxImage: s.cfg.SandboxImage})
		if err != nil {
			return err
		}
		// Stopped after the kubelet (stops run in reverse): its pods, shims, mounts and
		// bridge go with it.
		s.onStop(d.Stop)
		s.runtimeEndpoint = d.Endpoint()
		return nil
	case s.cfg.Runtime == RuntimeProcess:
		p, err := process.New(filepath.Join(s.dataDir, "runtime"))
		if err != nil {
			return err
		}
		rt = p
	default:
		rt = sim.New()
	}
	s.onStop(rt.Close)
	app := &criapp.Config{Name: string(s.cfg.Runtime), Runtime: rt, Socket: socket}
	s.run("runtime", app.Run)
	return nil
}

// startKubelet prepares the kubelet's directory and credentials, then runs it
// (kubelet/app) in the background: its TLS bootstrap may wait for a person.
func (s *starter) startKubelet(context.Context) error {
	s.kubeletDir = filepath.Join(s.dataDir, "kubelet")
	s.staticPodPath = filepath.Join(s.dataDir, "manifests")
	if err := os.MkdirAll(s.staticPodPath, 0o755); err != nil {
		return err
	}
	// Stopping stops every container (the runtime's Close, run after this), so the
	// tmpfs volumes of their pods are taken down too rather than left mounted in the
	// data directory.
	s.onStop(func() { _ = volumemanager.UnmountAll(filepath.Join(s.kubeletDir, "pods")) })
	// The kubeconfig a restart reuses names this start's apiserver URL; a new port makes
	// it stale, and the kubelet bootstraps again.
	if err := dropStaleKubeconfig(filepath.Join(s.kubeletDir, "kubelet.kubeconfig"), s.apiURL); err != nil {
		return err
	}
	// Each start hands out a bootstrap token valid for a while yet, dropping expired ones,
	// to its kubelet, its hollow nodes and, in the PKI directory, to kubelets joining
	// from elsewhere.
	tokenFile := filepath.Join(s.pkiDir, pki.BootstrapTokenFile)
	var err error
	if s.bootstrapToken, err = pki.EnsureBootstrapToken(tokenFile, pki.DefaultBootstrapTokenTTL, bootstrapTokenMinValid); err != nil {
		return err
	}
	warnEternalTokens(tokenFile)
	for _, path := range []string{filepath.Join(s.kubeletDir, pki.BootstrapKubeconfigFile), filepath.Join(s.pkiDir, pki.BootstrapKubeconfigFile)} {
		if err := writeBootstrapKubeconfig(path, s.apiURL, s.ca.CertPEM, s.bootstrapToken); err != nil {
			return err
		}
	}
	if !s.cfg.ManualCSRApproval {
		if err := s.issueKubeletCerts(); err != nil {
			return err
		}
	}
	s.run("kubelet", s.runKubelet)
	return nil
}

// nodeAddresses are the addresses the node reports and its serving certificate names.
func (s *starter) nodeAddresses() []corev1.NodeAddress {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: s.nodeIP}, {Type: corev1.NodeHostName, Address: s.cfg.NodeName}}
}

// issueKubeletCerts issues the kubelet's client certificate, as kubeadm init does for
// its node (kubelet.conf), instead of a CertificateSigningRequest round trip through
// csr-signer on every cold start; renewals still go through CSRs. It issues its serving
// certificate too: the node's address is this host's (loopback by default), which
// csr-signer approves for no node. With manual approval the kubelet bootstraps instead,
// so both requests wait for `kubectl certificate approve`.
func (s *starter) issueKubeletCerts() error {
	certDir := filepath.Join(s.kubeletDir, "pki")
	if _, err := certificate.WriteIssuedClientCert(filepath.Join(s.kubeletDir, "kubelet.kubeconfig"),
		filepath.Join(s.kubeletDir, pki.BootstrapKubeconfigFile), certDir,
		func() ([]byte, []byte, error) {
			pair, err := s.ca.IssueClient("system:node:"+s.cfg.NodeName, []string{"system:nodes"}, 0)
			return pair.CertPEM, pair.KeyPEM, err
		}); err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	if _, err := certificate.WriteIssuedServingCert(certDir, s.cfg.NodeName, s.nodeAddresses(),
		func(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
			_, certPEM, err := s.ca.Sign(tmpl, pub)
			return certPEM, err
		}); err != nil {
		return fmt.Errorf("kubelet serving certificate: %w", err)
	}
	return nil
}

// runKubelet joins as any kubelet would: with only the bootstrap kubeconfig it asks for
// its client certificate (system:node:<name>) through a CertificateSigningRequest, and
// for its serving certificate the same way, unless issueKubeletCerts issued them; then
// it runs the kubelet until ctx ends.
func (s *starter) runKubelet(ctx context.Context) error {
	certDir := filepath.Join(s.kubeletDir, "pki")
	bootstrapKubeconfig := filepath.Join(s.kubeletDir, pki.BootstrapKubeconfigFile)
	nodeConfig, _, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
		NodeName:                s.cfg.NodeName,
		KubeconfigPath:          filepath.Join(s.kubeletDir, "kubelet.kubeconfig"),
		BootstrapKubeconfigPath: bootstrapKubeconfig,
		CertDir:                 certDir,
		RotateCertificates:      true,
	})
	if err != nil {
		return fmt.Errorf("TLS bootstrap: %w", err)
	}
	// Its client certificate held, the kubelet needs the token no more: it goes, as
	// kubeadm join removes bootstrap-kubelet.conf.
	if err := os.Remove(bootstrapKubeconfig); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	clientOptions := componentbase.NewClientOptions(-1, 0)
	clientOptions.Complete(nodeConfig, s.obs.kubelet, "skiff-kubelet")
	client, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		return err
	}
	// Toward NATS the kubelet is its CSR-issued client certificate, as rotated.
	current := filepath.Join(certDir, certificate.ClientPairName+"-current.pem")
	recorder, err := s.obs.recorder("kubelet", s.cfg.NodeName, client, current, current)
	if err != nil {
		return err
	}
	serverTLS, err := certificate.StartServing(ctx, client, s.cfg.NodeName, certDir, s.nodeAddresses(), s.ca.CertPEM)
	if err != nil {
		return err
	}
	app := &kubeletapp.Config{Recorder: recorder, Kubelet: kubelet.Config{
		NodeName:        s.cfg.NodeName,
		Client:          client,
		RuntimeEndpoint: s.runtimeEndpoint,
		PodCIDR:         s.cfg.PodCIDR,
		RootDir:         s.kubeletDir,
		NodeIP:          s.nodeIP,
		ServerAddr:      s.kubeletAddr,
		ServerTLS:       serverTLS,
		TracerProvider:  s.obs.kubelet,
		PodManifestPath: s.staticPodPath,
		ClusterDNS:      s.clusterDNS,
		ClusterDomain:   ClusterDomain,
	}}
	return app.Run(ctx)
}

// startProxy runs the proxy (proxy/app), as kube-proxy beside the kubelet:
// system:kube-proxy programs this host's nftables. Its table goes when the all-in-one
// stops. Where nftables cannot be programmed, it says so and runs without.
func (s *starter) startProxy(ctx context.Context) error {
	if s.cfg.NoProxy {
		return nil
	}
	client, _, err := s.client(pki.KubeProxy, nil)
	if err != nil {
		return err
	}
	nft, err := proxy.NewNFTables(cmp.Or(s.cfg.ProxyTable, proxy.DefaultTable))
	if err != nil && !errors.Is(err, proxy.ErrNoDataplane) {
		return err
	}
	if err != nil {
		slog.Warn("running without a proxy: Service ClusterIPs and NodePorts will not forward (run as root, or --proxy=false to silence this)", "err", err)
		return nil
	}
	app := &proxyapp.Config{Proxy: proxy.Config{Client: client, NodeName: s.cfg.NodeName, Table: s.cfg.ProxyTable, NFTables: nft, CleanupOnExit: true}}
	s.run("proxy", app.Run)
	return nil
}

// startHollowNodes runs cfg.HollowNodes hollow nodes (kubelet/hollow), which join with
// the bootstrap token as any kubelet from elsewhere would.
func (s *starter) startHollowNodes(context.Context) error {
	if s.cfg.HollowNodes == 0 {
		return nil
	}
	hollowDir := filepath.Join(s.dataDir, "hollow")
	for i := range s.cfg.HollowNodes {
		if err := dropStaleKubeconfig(filepath.Join(hollowDir, hollow.NodeName("", i), "kubelet.kubeconfig"), s.apiURL); err != nil {
			return err
		}
	}
	hollowBootstrap := filepath.Join(hollowDir, pki.BootstrapKubeconfigFile)
	if err := writeBootstrapKubeconfig(hollowBootstrap, s.apiURL, s.ca.CertPEM, s.bootstrapToken); err != nil {
		return err
	}
	s.run("hollow-nodes", func(ctx context.Context) error {
		return hollow.Run(ctx, hollow.Config{Nodes: s.cfg.HollowNodes, BootstrapKubeconfig: hollowBootstrap,
			RootDir: hollowDir, NodeIP: s.nodeIP, TracerProvider: s.obs.kubelet,
			// Their events go through NATS as the kubelet's do (POSTed when NATS is off).
			NATSURL: s.obs.natsURL, NATSCA: s.obs.caPEM, NATSServerName: natsServerName})
	})
	return nil
}

// waitForServiceAccount returns once the default namespace's ServiceAccount "default"
// exists, as kube's e2e framework waits for it: until the serviceaccount controller
// makes it, ServiceAccount admission refuses pods there (serviceaccount "default" not
// found), and a user's first `kubectl run` after the export line must not. It does not
// wait when the controller manager runs without that controller.
func (s *starter) waitForServiceAccount(ctx context.Context) error {
	controllers := s.cfg.ControllerManager.Controllers
	if controllers == nil {
		controllers = []string{"*"}
	}
	if !controllermanager.IsControllerEnabled(controllermanager.ServiceAccountController, controllers) {
		return nil
	}
	client, _, err := s.client(pki.Admin, nil)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
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
