// Package allinone runs every skiff service in one process: an embedded etcd, the
// apiserver, the scheduler, a built-in CRI runtime and one kubelet. Each still talks to
// the others over the wire it always uses (HTTP to the apiserver, gRPC on a unix socket
// to the runtime), so the all-in-one exercises exactly the paths of the full stack.
package allinone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/embedetcd"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet"
	criruntime "skiff.dev/services/runtime"
	"skiff.dev/services/runtime/process"
	"skiff.dev/services/runtime/sim"
	"skiff.dev/services/scheduler"
)

// Runtime names a built-in CRI runtime.
type Runtime string

// The built-in runtimes (DESIGN.md "Runtimes behind CRI").
const (
	RuntimeProcess Runtime = "process"
	RuntimeSim     Runtime = "sim"
)

// Config is what the all-in-one runs.
type Config struct {
	// DataDir holds etcd's data, the runtime's and kubelet's state and the admin
	// kubeconfig; created if missing.
	DataDir string
	// BindAddress is the address every listener binds, e.g. "127.0.0.1".
	BindAddress string
	// APIServerPort is the apiserver's port (DESIGN.md: 6443); 0 picks a free one.
	APIServerPort int
	// EtcdPort is the embedded etcd's client port (2379); 0 picks a free one.
	EtcdPort int
	// Runtime is the built-in CRI runtime the kubelet uses.
	Runtime Runtime
	// NodeName is the kubelet's node; "" means the host name.
	NodeName string
}

// Cluster is a running all-in-one.
type Cluster struct {
	// Kubeconfig is the absolute path of the admin kubeconfig.
	Kubeconfig string
	// APIServerURL is the apiserver's base URL.
	APIServerURL string
}

// Start brings every service up and returns once the apiserver serves; the services run
// until ctx ends, and wait returns when all of them have stopped. Errors: an unusable
// data directory, a port in use, an unknown runtime.
func Start(ctx context.Context, cfg Config) (cluster *Cluster, wait func() error, err error) {
	if cfg.Runtime != RuntimeProcess && cfg.Runtime != RuntimeSim {
		return nil, nil, fmt.Errorf("unknown runtime %q: want %q or %q", cfg.Runtime, RuntimeProcess, RuntimeSim)
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

	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir:       filepath.Join(dataDir, "etcd"),
		ClientURL: "http://" + net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.EtcdPort)),
	})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, etcd.Close)
	etcdClient, err := etcd.Client()
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = etcdClient.Close() })

	l, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.APIServerPort)))
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver listen: %w", err)
	}
	stops = append(stops, func() { _ = l.Close() })
	apiURL := "https://" + l.Addr().String()
	// The PKI is made once and kept: restarts reuse the CA and every identity.
	pkiDir := filepath.Join(dataDir, "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: pkiDir, APIServerURL: apiURL, APIServerHosts: []string{cfg.BindAddress}}); err != nil {
		return nil, nil, err
	}
	ca, err := pki.LoadCA(pkiDir)
	if err != nil {
		return nil, nil, err
	}
	apiConfig, err := apiserver.ConfigFromPKI(pkiDir, etcdClient)
	if err != nil {
		return nil, nil, err
	}
	api, err := apiserver.New(apiConfig)
	if err != nil {
		return nil, nil, err
	}
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	if err := writeKubeconfig(kubeconfig, apiURL, pkiDir); err != nil {
		return nil, nil, err
	}
	// clientConfig reaches the apiserver as one of pki's identities.
	clientConfig := func(id pki.Identity) *rest.Config {
		certFile, keyFile := pki.KeyPairFiles(pkiDir, id.Name)
		return &rest.Config{Host: apiURL, QPS: 100, Burst: 200, UserAgent: "skiff-" + id.Name,
			TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(pkiDir, pki.CACertFile), CertFile: certFile, KeyFile: keyFile}}
	}

	runCtx, cancel := context.WithCancel(ctx)
	stops = append(stops, cancel)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
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

	client, err := kubernetes.NewForConfig(clientConfig(pki.Scheduler))
	if err != nil {
		return nil, nil, err
	}

	sched, err := scheduler.New(scheduler.Config{Client: client})
	if err != nil {
		return nil, nil, err
	}
	run("scheduler", sched.Run)

	socket := filepath.Join(dataDir, "run", string(cfg.Runtime)+".sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, nil, err
	}
	switch cfg.Runtime {
	case RuntimeProcess:
		rt, err := process.New(filepath.Join(dataDir, "runtime"))
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, rt.Close)
		run("runtime", func(ctx context.Context) error { return criruntime.Serve(ctx, socket, rt, rt) })
	case RuntimeSim:
		rt := sim.New()
		stops = append(stops, rt.Close)
		run("runtime", func(ctx context.Context) error { return criruntime.Serve(ctx, socket, rt, rt) })
	}

	// The node's identity, system:node:<name> in system:nodes.
	nodeCert, err := ca.IssueClient("system:node:"+cfg.NodeName, []string{"system:nodes"}, 0)
	if err != nil {
		return nil, nil, err
	}
	nodeConfig := &rest.Config{Host: apiURL, QPS: 100, Burst: 200, UserAgent: "skiff-kubelet",
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: nodeCert.CertPEM, KeyData: nodeCert.KeyPEM}}
	nodeClient, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		return nil, nil, err
	}
	kl, err := kubelet.New(kubelet.Config{
		NodeName:        cfg.NodeName,
		Client:          nodeClient,
		RuntimeEndpoint: "unix://" + socket,
		RootDir:         filepath.Join(dataDir, "kubelet"),
	})
	if err != nil {
		return nil, nil, err
	}
	run("kubelet", kl.Run)

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
	return &Cluster{Kubeconfig: kubeconfig, APIServerURL: apiURL}, wait, nil
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
