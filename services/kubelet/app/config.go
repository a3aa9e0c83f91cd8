package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/certificate"
	"skiff.dev/services/kubelet/nodestatus"
	"skiff.dev/services/tunnel"
)

// Config is a kubelet ready to run, every piece built: what cmd/kubelet/app's
// KubeletDeps are to kube. Options.Config builds it from flags; the all-in-one fills it
// from its own TLS bootstrap, clients, recorder and tracer provider.
type Config struct {
	// Kubelet is the kubelet's own configuration, given to kubelet.New: at least
	// NodeName, Client (the node's clientset) and RuntimeEndpoint; ServerAddr with
	// ServerTLS for the kubelet API; Logger and TracerProvider. Run does not shut the
	// TracerProvider down. Kubelet.Recorder is replaced by Recorder when that is set.
	Kubelet kubelet.Config
	// Recorder delivers the kubelet's events (to NATS as system:node:<name>, or POSTed);
	// Run starts it, gives it to the kubelet as Kubelet.Recorder, and stops it when it
	// returns, after a last delivery of what it holds (eventrecorder.Recorder.Start).
	// Callers must not run it themselves. nil leaves Kubelet.Recorder as it is (nil
	// records none).
	Recorder *eventrecorder.Recorder
	// Serving, when set, serves the health endpoints (liveness: the kubelet's PLEG) and
	// /metrics (the Recorder's, Go's and the process's) while Run runs; nil serves none.
	Serving *serving.Options
	// Tunnel, when set, is the agent holding a tunnel to exec-proxy
	// (konnectivity's agent), which Run runs beside the kubelet. It carries the kubelet
	// API, so it needs Kubelet.ServerAddr; its KubeletAddress "" means the kubelet API's
	// own address (loopback where it listens on every address). nil runs none.
	Tunnel *tunnel.AgentConfig
}

// Config builds the kubelet of o, as cmd/kubelet/app's RunKubelet prepares it: the
// client through the TLS bootstrap (blocking until the CSR is approved or ctx ends)
// when a kubeconfig and a bootstrap kubeconfig or rotation are given, else from
// --kubeconfig; a tracer provider (OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set); the
// event recorder (NATS with --nats-url); the kubelet API's TLS from --tls-cert-file or
// a serving certificate requested from the cluster (renewed until ctx ends); and the
// tunnel agent's configuration. It logs with slog's default logger (Logger installs
// it). Errors name the step that failed; the tracer provider is shut down then.
func (o *Options) Config(ctx context.Context) (_ *Config, err error) {
	logger := slog.Default()
	certDir := o.CertDir
	if certDir == "" {
		certDir = filepath.Join(o.RootDir, "pki")
	}
	nodeIP := o.NodeIP
	if nodeIP == "" {
		// Chosen here so a serving certificate names the address the node reports.
		nodeIP = nodestatus.DefaultNodeIP()
	}
	driver, err := o.cgroupDriver()
	if err != nil {
		return nil, componentbase.Usagef(err)
	}
	logMaxSize, err := o.containerLogMaxSize()
	if err != nil {
		return nil, componentbase.Usagef(err)
	}
	thresholds, err := o.evictionHard()
	if err != nil {
		return nil, componentbase.Usagef(err)
	}

	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; a no-op otherwise.
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: "kubelet", NodeName: o.NodeName})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		if err != nil {
			componentbase.ShutdownTracing(tp)
		}
	}()
	restConfig, err := o.restConfig(ctx, certDir, tp, logger)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	natsTLS, err := o.natsTLS(certDir)
	if err != nil {
		return nil, fmt.Errorf("NATS client TLS: %w", err)
	}
	// Toward NATS the kubelet is its node, as its certificate says.
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "kubelet", Host: o.NodeName, User: "system:node:" + o.NodeName,
		NATSURL: o.NATS.URL, TLS: natsTLS, Client: client})
	if err != nil {
		return nil, fmt.Errorf("event recorder: %w", err)
	}

	var serverAddr string
	var serverTLS *tls.Config
	if o.TLSCertFile != "" {
		caPEM, err := pki.ReadCA(o.Client.Kubeconfig, o.ClientCAFile)
		if err == nil {
			serverTLS, err = pki.ServingTLS(o.TLSCertFile, o.TLSPrivateKeyFile, caPEM)
		}
		if err != nil {
			return nil, fmt.Errorf("kubelet API TLS: %w", err)
		}
		serverAddr = net.JoinHostPort(o.Address, strconv.Itoa(o.Port))
	} else if o.RotateServerCertificates && o.Port > 0 {
		serverTLS, err = servingFromCluster(ctx, client, o.NodeName, nodeIP, certDir, o.ClientCAFile, o.Client.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubelet serving certificate: %w", err)
		}
		serverAddr = net.JoinHostPort(o.Address, strconv.Itoa(o.Port))
	}

	var tunnelConfig *tunnel.AgentConfig
	if o.TunnelServer != "" {
		if tunnelConfig, err = o.tunnelConfig(certDir, logger); err != nil {
			return nil, fmt.Errorf("tunnel agent: %w", err)
		}
	}

	var unsafeSysctls []string
	if o.AllowedUnsafeSysctls != "" {
		unsafeSysctls = strings.Split(o.AllowedUnsafeSysctls, ",")
	}
	return &Config{
		Kubelet: kubelet.Config{
			AllowedUnsafeSysctls: unsafeSysctls,
			NodeName:             o.NodeName,
			Client:               client,
			RuntimeEndpoint:      o.ContainerRuntimeEndpoint,
			GenericPLEG:          !o.EventedPLEG,
			RootDir:              o.RootDir,
			EvictionHard:         thresholds,
			NodeIP:               nodeIP,
			ServerAddr:           serverAddr,
			ServerTLS:            serverTLS,
			Logger:               logger,
			TracerProvider:       tp,

			PodManifestPath:    o.PodManifestPath,
			FileCheckFrequency: o.FileCheckFrequency,
			PodCIDR:            o.PodCIDR,
			ClusterDNS:         splitList(o.ClusterDNS),
			CgroupDriver:       driver,
			ClusterDomain:      o.ClusterDomain,
			ResolverConfig:     o.ResolvConf,

			ContainerLogMaxSize:  logMaxSize,
			ContainerLogMaxFiles: o.ContainerLogMaxFiles,
		},
		Recorder: recorder,
		Serving:  o.Serving,
		Tunnel:   tunnelConfig,
	}, nil
}

// Run builds the kubelet (kubelet.New), starts the Recorder, the Serving endpoints and
// the Tunnel agent, and runs the kubelet until ctx ends (nil) or it fails; what it
// started stops when it returns. Errors: a missing or invalid Kubelet field (as
// kubelet.New names it), a port that cannot be listened on, a Tunnel without the
// kubelet API, the kubelet's own failure; each wrapped with what failed.
func (c *Config) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	kcfg := c.Kubelet
	var collectors []prometheus.Collector
	if c.Recorder != nil {
		stop := c.Recorder.Start()
		defer stop()
		kcfg.Recorder = c.Recorder
		collectors = append(collectors, c.Recorder.Metrics())
	}
	kl, err := kubelet.New(kcfg)
	if err != nil {
		return fmt.Errorf("create kubelet: %w", err)
	}
	if c.Serving != nil {
		if _, err := c.Serving.Start(ctx, serving.NewRegistry(collectors...), serving.WithLiveness(kl.Healthz)); err != nil {
			return fmt.Errorf("health endpoints: %w", err)
		}
	}
	if c.Tunnel != nil {
		if kl.ServerAddress() == "" {
			return errors.New("tunnel agent: it needs the kubelet API (Kubelet.ServerAddr), which the tunnel carries")
		}
		agentConfig := *c.Tunnel
		if agentConfig.KubeletAddress == "" {
			agentConfig.KubeletAddress = tunnel.KubeletAddress(kl.ServerAddress())
		}
		agent, err := tunnel.NewAgent(agentConfig)
		if err != nil {
			return fmt.Errorf("tunnel agent: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = agent.Run(ctx)
		}()
	}
	if err := kl.Run(ctx); err != nil {
		return fmt.Errorf("kubelet failed: %w", err)
	}
	return nil
}

// restConfig is how the kubelet reaches the apiserver, completed with o.Client's
// content type, rate limit and tp's tracing: through the TLS bootstrap and the client
// certificate's rotation (certificate.NewClientConfig) when --kubeconfig is set with
// --bootstrap-kubeconfig or --rotate-certificates, else --kubeconfig as it is.
func (o *Options) restConfig(ctx context.Context, certDir string, tp *tracing.Provider, logger *slog.Logger) (*rest.Config, error) {
	if o.Client.Kubeconfig == "" || (o.BootstrapKubeconfig == "" && !o.RotateCertificates) {
		return o.Client.RESTConfig(tp, "")
	}
	cfg, _, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
		NodeName: o.NodeName, KubeconfigPath: o.Client.Kubeconfig, BootstrapKubeconfigPath: o.BootstrapKubeconfig,
		CertDir: certDir, RotateCertificates: o.RotateCertificates, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	o.Client.Complete(cfg, tp, "")
	return cfg, nil
}

// natsTLS is the kubelet's mutual TLS toward NATS, nil without --nats-url: its own
// client certificate (--nats-cert-file, default the one client-go's certificate
// manager keeps current in certDir, read again at every connect) and the cluster CA
// (--nats-ca-file, --client-ca-file, or the CA of --kubeconfig).
func (o *Options) natsTLS(certDir string) (*tls.Config, error) {
	if o.NATS.URL == "" {
		return nil, nil
	}
	certFile := o.NATS.CertFile
	if certFile == "" {
		certFile = currentClientPair(certDir)
	}
	caPEM, err := pki.ReadCA(o.Client.Kubeconfig, o.NATS.CAFile, o.ClientCAFile)
	if err != nil {
		return nil, err
	}
	return pki.ReloadingClientTLS(caPEM, certFile, o.NATS.KeyFile)
}

// tunnelConfig is the kubelet's end of its node-initiated tunnel to exec-proxy at
// --tunnel-server (whose certificate must name --tunnel-server-name, default the
// server's host): its node client certificate (--tunnel-cert-file, default the one
// client-go's certificate manager keeps current in certDir) and the cluster CA
// (--tunnel-ca-file, --client-ca-file, or the CA of --kubeconfig). KubeletAddress is
// left to Config.Run, which knows where the kubelet API listens.
func (o *Options) tunnelConfig(certDir string, logger *slog.Logger) (*tunnel.AgentConfig, error) {
	certFile := o.TunnelCertFile
	if certFile == "" {
		certFile = currentClientPair(certDir)
	}
	caPEM, err := pki.ReadCA(o.Client.Kubeconfig, o.TunnelCAFile, o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA: %w", err)
	}
	tlsConfig, err := tunnel.ClientTLS(caPEM, certFile, o.TunnelKeyFile, o.TunnelServerName)
	if err != nil {
		return nil, err
	}
	return &tunnel.AgentConfig{Server: o.TunnelServer, NodeName: o.NodeName, TLS: tlsConfig, Logger: logger}, nil
}

// servingFromCluster starts the kubelet API's serving certificate through a CSR for the
// addresses the node reports (InternalIP nodeIP, Hostname nodeName), renewed until ctx
// ends; clients are verified against clientCAFile, or the CA kubeconfig trusts.
func servingFromCluster(ctx context.Context, client kubernetes.Interface, nodeName, nodeIP, certDir, clientCAFile, kubeconfig string) (*tls.Config, error) {
	caPEM, err := pki.ReadCA(kubeconfig, clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: nodeName}}
	return certificate.StartServing(ctx, client, nodeName, certDir, addresses, caPEM)
}

// currentClientPair is the file, in certDir, holding the client certificate and key
// client-go's certificate manager keeps current.
func currentClientPair(certDir string) string {
	return filepath.Join(certDir, certificate.ClientPairName+"-current.pem")
}
