package allinone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"go.opentelemetry.io/otel"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/natsserver"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/tracing"
)

// observability is what the all-in-one adds for tracing and events: one tracer provider
// per service (so each hop shows under its own service.name even in one process) and
// the embedded NATS server events travel through, which runs the configuration the
// compose stack's does: mutual TLS, and per-identity permissions granted by the
// apiserver's auth callout.
type observability struct {
	apiserver, scheduler, controllerManager, kubelet, runtime *tracing.Provider
	// natsURL is the embedded NATS server's URL (tls://host:port), "" when NATS is off.
	natsURL string
	// caPEM is the cluster CA NATS's clients verify it with.
	caPEM []byte
	stops []func()
}

// natsServerName is the name clients verify NATS's certificate for: every nats-server
// certificate holds it (pki.DefaultNATSHosts), whatever address the all-in-one binds
// (0.0.0.0, a LAN address), and the clients are in this process.
const natsServerName = "localhost"

// startObservability builds the tracer providers and starts NATS with JetStream data
// under dataDir/nats from pkiDir (natsserver.Config.PKIDir): it serves pkiDir's
// nats-server key pair to clients with a certificate from pkiDir's CA only, and trusts
// the auth callout signed with pkiDir's nats-auth-callout.nk. The runtime's provider
// becomes the global one: the built-in CRI servers trace with it.
func startObservability(ctx context.Context, cfg Config, dataDir, pkiDir string) (_ *observability, err error) {
	o := &observability{}
	defer func() {
		if err != nil {
			o.stop()
		}
	}()
	for _, p := range []struct {
		dst     **tracing.Provider
		service string
		node    string
	}{
		{&o.apiserver, "apiserver", ""}, {&o.scheduler, "scheduler", ""}, {&o.controllerManager, "controller-manager", ""},
		{&o.kubelet, "kubelet", cfg.NodeName}, {&o.runtime, "runtime", cfg.NodeName},
	} {
		tp, err := tracing.NewProvider(ctx, tracing.Config{Service: p.service, NodeName: p.node, Exporter: cfg.TraceExporter})
		if err != nil {
			return nil, err
		}
		*p.dst = tp
		o.stops = append(o.stops, func() { _ = tp.Shutdown(context.Background()) })
	}
	otel.SetTracerProvider(o.runtime)

	if cfg.NATSPort >= 0 {
		ca, err := pki.LoadCA(pkiDir)
		if err != nil {
			return nil, err
		}
		o.caPEM = ca.CertPEM
		ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(dataDir, "nats"), Host: cfg.BindAddress, Port: cfg.NATSPort, PKIDir: pkiDir})
		if err != nil {
			return nil, err
		}
		o.stops = append(o.stops, ns.Shutdown)
		o.natsURL = "tls://" + net.JoinHostPort(cfg.BindAddress, strconv.Itoa(ns.Port()))
	}
	return o, nil
}

// natsTLS returns a copy of c, a NATS client's TLS configuration, that verifies the
// embedded server by natsServerName; nil when NATS is off.
func (o *observability) natsTLS(c *tls.Config) *tls.Config {
	if o.natsURL == "" || c == nil {
		return nil
	}
	c = c.Clone()
	c.ServerName = natsServerName
	return c
}

// recorder builds an event recorder for component that publishes to NATS, presenting
// the client key pair certFile/keyFile (read at every connect, so a kubelet's rotated
// certificate is used), or POSTs through client when NATS is off. Toward NATS it is the
// node host (system:node:<host>) when host is set, else its certificate's user. Run it
// with the services.
func (o *observability) recorder(component, host string, client kubernetes.Interface, certFile, keyFile string) (*eventrecorder.Recorder, error) {
	if client == nil {
		return nil, errors.New("allinone: recorder needs a client")
	}
	cfg := eventrecorder.Config{Component: component, Host: host, NATSURL: o.natsURL, Client: client}
	if o.natsURL != "" {
		tlsConfig, err := pki.ReloadingClientTLS(o.caPEM, certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", component, err)
		}
		cfg.TLS = o.natsTLS(tlsConfig)
		if host != "" {
			cfg.User = "system:node:" + host
		} else if cfg.User, err = pki.NATSUser(tlsConfig); err != nil {
			return nil, fmt.Errorf("%s: %w", component, err)
		}
	}
	return eventrecorder.New(cfg)
}

// stop stops NATS and flushes every provider, in reverse order of start.
func (o *observability) stop() {
	for i := len(o.stops) - 1; i >= 0; i-- {
		o.stops[i]()
	}
}
