// Package hollow runs many hollow nodes in one process, as Kubernetes' kubemark does
// (cmd/kubemark, pkg/kubemark/hollow_kubelet.go): each is the real kubelet (syncLoop,
// PLEG, pod workers, status manager, node status and Lease) over its own simulated CRI
// runtime (package sim). The kubelet still speaks only CRI, through the generated CRI
// clients, but over a cri.InProcessConn rather than a unix socket: the socket's gRPC
// framing and marshalling were a third of the process's CPU and are not what a hollow
// node simulates. Each joins the cluster as any kubelet does, through its own TLS bootstrap
// (a CertificateSigningRequest for system:node:<name>). Hollow kubelets serve no
// kubelet API (no exec, attach or logs). Each publishes its events to NATS as any skiff
// kubelet does, over its own connection with its own client certificate, or POSTs them
// when no NATS URL is given.
package hollow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet"
	"skiff.dev/services/kubelet/certificate"
	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volumemanager"
)

// DefaultNamePrefix starts every hollow node's name: hollow-0, hollow-1, ...
const DefaultNamePrefix = "hollow-"

// Config is a set of hollow nodes.
type Config struct {
	// Nodes is how many hollow nodes run; at least 1.
	Nodes int
	// NamePrefix starts each node's name, followed by its index; "" means
	// DefaultNamePrefix.
	NamePrefix string
	// BootstrapKubeconfig is the kubeconfig with a bootstrap token each node requests
	// its client certificate with; required.
	BootstrapKubeconfig string
	// RootDir holds one directory per node (<RootDir>/<name>: kubeconfig, key pairs,
	// pod logs and volumes); required.
	RootDir string
	// NodeIP is the InternalIP every hollow node reports; "" means the kubelet's default.
	NodeIP string
	// Capacity overrides entries of each node's capacity (kubelet.Config.Capacity).
	Capacity v1.ResourceList
	// GenericPLEG makes every node relist its runtime every second instead of reading
	// its container events (kubelet.Config.GenericPLEG).
	GenericPLEG bool
	// NATSURL is the NATS server the nodes publish their events to ("tls://host:port");
	// "" POSTs them to the apiserver (eventrecorder.Config.NATSURL).
	NATSURL string
	// NATSCA is the PEM CA that verifies NATS's serving certificate; required with
	// NATSURL. Each node presents its own client certificate, the one its TLS bootstrap
	// obtained (<RootDir>/<name>/pki/kubelet-client-current.pem), read at every connect.
	NATSCA []byte
	// NATSServerName, when set, is the name NATS's certificate is verified for instead
	// of NATSURL's host.
	NATSServerName string
	// TracerProvider traces the kubelets' requests, syncs and CRI calls; nil means none.
	TracerProvider trace.TracerProvider
	// Logger receives the kubelets' logs; nil means slog.Default().
	Logger *slog.Logger
}

// NodeName is the name of hollow node i: prefix followed by i.
func NodeName(prefix string, i int) string {
	if prefix == "" {
		prefix = DefaultNamePrefix
	}
	return fmt.Sprintf("%s%d", prefix, i)
}

// Run starts cfg.Nodes hollow nodes and runs them until ctx ends; each node's runtime
// and kubelet stop with it. A node that cannot start (its bootstrap failed) ends every
// node: Run returns that error once all have stopped,
// and nil after a stop caused by ctx.
func Run(ctx context.Context, cfg Config) error {
	switch {
	case cfg.Nodes < 1:
		return errors.New("hollow: Nodes must be at least 1")
	case cfg.BootstrapKubeconfig == "":
		return errors.New("hollow: BootstrapKubeconfig is required")
	case cfg.RootDir == "":
		return errors.New("hollow: RootDir is required")
	case cfg.NATSURL != "" && len(cfg.NATSCA) == 0:
		return errors.New("hollow: NATSCA is required with NATSURL")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = tracing.Noop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, cfg.Nodes)
	for i := range cfg.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runNode(ctx, cfg, NodeName(cfg.NamePrefix, i)); err != nil && ctx.Err() == nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	// The hollow kubelets mount their pods' tmpfs volumes (secrets, the service-account
	// token) for real; none may outlive the nodes, or their directories cannot be removed.
	errs = append(errs, volumemanager.UnmountAll(cfg.RootDir))
	return errors.Join(errs...)
}

// runNode runs one hollow node: its sim runtime, its TLS bootstrap, then its kubelet,
// until ctx ends.
func runNode(ctx context.Context, cfg Config, name string) error {
	dir := filepath.Join(cfg.RootDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("hollow node %s: %w", name, err)
	}
	logger := cfg.Logger.With("hollowNode", name)
	rt := sim.NewHollow()
	defer rt.Close()
	err := func() error {
		restConfig, _, err := certificate.NewClientConfig(ctx, certificate.ClientOptions{
			NodeName:                name,
			KubeconfigPath:          filepath.Join(dir, "kubelet.kubeconfig"),
			BootstrapKubeconfigPath: cfg.BootstrapKubeconfig,
			CertDir:                 filepath.Join(dir, "pki"),
			RotateCertificates:      true,
			Logger:                  logger,
		})
		if err != nil {
			return err
		}
		restConfig.QPS, restConfig.UserAgent = -1, "skiff-kubelet-hollow"
		restConfig.WrapTransport = tracing.WrapTransport(cfg.TracerProvider)
		client, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			return err
		}
		events := eventrecorder.Config{Component: "kubelet", Host: name, User: "system:node:" + name, Client: client, NATSURL: cfg.NATSURL}
		if cfg.NATSURL != "" {
			certFile := filepath.Join(dir, "pki", certificate.ClientPairName+"-current.pem")
			if events.TLS, err = pki.ReloadingClientTLS(cfg.NATSCA, certFile, ""); err != nil {
				return fmt.Errorf("NATS client TLS: %w", err)
			}
			events.TLS.ServerName = cfg.NATSServerName
		}
		recorder, err := eventrecorder.New(events)
		if err != nil {
			return err
		}
		go func() { _ = recorder.Run(ctx) }()
		kl, err := kubelet.New(kubelet.Config{
			NodeName:       name,
			Client:         client,
			RuntimeConn:    cri.NewInProcessConn(rt, rt),
			GenericPLEG:    cfg.GenericPLEG,
			VolumeMounter:  volume.DirMounter{},
			RootDir:        dir,
			NodeIP:         cfg.NodeIP,
			NodeLabels:     map[string]string{"skiff.dev/hollow-node": "true"},
			Capacity:       cfg.Capacity,
			Logger:         logger,
			Recorder:       recorder,
			TracerProvider: cfg.TracerProvider,
		})
		if err != nil {
			return err
		}
		return kl.Run(ctx)
	}()
	if err != nil {
		return fmt.Errorf("hollow node %s: %w", name, err)
	}
	return nil
}
