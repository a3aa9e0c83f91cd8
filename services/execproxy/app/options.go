// Package app is exec-proxy's command, in the shape of kube's cmd/kube-apiserver/app
// (whose kubelet proxying exec-proxy stands for): Options (the flags) → Config (the
// built client, TLS and listeners) → Run. services/cmd/exec-proxy parses the flags and
// calls Options.Run; the all-in-one builds a Config itself, from in-memory TLS material
// and a listener it opened, and calls Config.Run.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/tunnel"
)

// Options are exec-proxy's flags.
type Options struct {
	// Client is --kubeconfig (exec-proxy's identity, system:skiff:exec-proxy, which
	// reads pods and nodes; "" means the in-cluster configuration),
	// --kube-api-content-type, --kube-api-qps and --kube-api-burst (client-go's
	// defaults: JSON, 5 QPS, burst 10).
	Client componentbase.ClientOptions
	// BindAddress is --bind-address, the IP both ports listen on.
	BindAddress string
	// Port is --port, the HTTPS port the apiserver proxies to.
	Port int
	// TLSCertFile and TLSPrivateKeyFile are --tls-cert-file and --tls-private-key-file:
	// the serving pair of both ports (pki: exec-proxy-serving.crt, .key).
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile is --client-ca-file, the cluster CA: it verifies the kubelets'
	// serving certificates and their tunnels' client certificates.
	ClientCAFile string
	// RequestHeaderClientCAFile is --requestheader-client-ca-file, the front-proxy CA
	// (pki: front-proxy-ca.crt): the only CA whose client certificates may call
	// exec-proxy. Required.
	RequestHeaderClientCAFile string
	// RequestHeaderAllowedNames is --requestheader-allowed-names: comma-separated client
	// certificate CNs whose X-Remote-User/X-Remote-Group headers are trusted.
	RequestHeaderAllowedNames string
	// KubeletClientCertificate and KubeletClientKey are --kubelet-client-certificate and
	// --kubelet-client-key: the client pair toward kubelets (pki: exec-proxy.crt, .key).
	KubeletClientCertificate, KubeletClientKey string
	// TunnelPort is --tunnel-port: the gRPC port where kubelets open their
	// node-initiated tunnels; 0 serves none, every kubelet is dialed directly.
	TunnelPort int
	// Serving is --log-level, --log-format, the plain-HTTP --health-address and
	// --metrics-bind-address, and --profiling; /healthz is also on the HTTPS port.
	Serving *serving.Options
}

// NewOptions are exec-proxy's defaults: every address, execproxy.DefaultPort,
// tunnel.DefaultPort, the apiserver's front-proxy client as the only trusted name, and
// client-go's client defaults.
func NewOptions() *Options {
	return &Options{
		BindAddress:               "0.0.0.0",
		Port:                      execproxy.DefaultPort,
		RequestHeaderAllowedNames: execproxy.FrontProxyUser,
		TunnelPort:                tunnel.DefaultPort,
		Serving:                   serving.NewOptions(""),
	}
}

// AddFlags registers o's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Client.AddFlags(fs, "kubeconfig of exec-proxy's identity (system:skiff:exec-proxy), to read pods and nodes; empty means in-cluster config")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "HTTPS port the apiserver proxies to")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serving certificate (pki: exec-proxy-serving.crt)")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "serving key (pki: exec-proxy-serving.key)")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "cluster CA: verifies the kubelets' serving certificates and their tunnels' client certificates")
	fs.StringVar(&o.RequestHeaderClientCAFile, "requestheader-client-ca-file", o.RequestHeaderClientCAFile, "front-proxy CA (pki: front-proxy-ca.crt): the only CA whose client certificates may call exec-proxy; required")
	fs.StringVar(&o.RequestHeaderAllowedNames, "requestheader-allowed-names", o.RequestHeaderAllowedNames, "comma-separated client certificate CNs whose X-Remote-User/X-Remote-Group headers are trusted")
	fs.StringVar(&o.KubeletClientCertificate, "kubelet-client-certificate", o.KubeletClientCertificate, "client certificate toward kubelets (pki: exec-proxy.crt)")
	fs.StringVar(&o.KubeletClientKey, "kubelet-client-key", o.KubeletClientKey, "client key toward kubelets (pki: exec-proxy.key)")
	o.Serving.AddFlags(fs)
	fs.IntVar(&o.TunnelPort, "tunnel-port", o.TunnelPort, "gRPC port (mutual TLS, the serving certificate above) where kubelets open their node-initiated tunnels (kubelet --tunnel-server); a node with a tunnel is reached through it; 0 = none, every kubelet is dialed directly")
}

// Validate reports the first unusable flag value as a componentbase.UsageError (exit
// code 2): no --requestheader-client-ca-file, or Serving's.
func (o *Options) Validate() error {
	if o.RequestHeaderClientCAFile == "" {
		return componentbase.Usagef(errors.New("--requestheader-client-ca-file is required: the front-proxy CA that issued the apiserver's front-proxy-client certificate"))
	}
	return componentbase.Usagef(o.Serving.Validate())
}

// Logger makes the logger Serving describes slog's default and returns it; on invalid
// Serving options it exits 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("exec-proxy") }

// Config builds what exec-proxy runs with from the flags' files: the serving TLS of the
// HTTPS port (client certificates of the front-proxy CA only) and of the tunnel port
// (nodes' certificates of the cluster CA), the TLS toward kubelets (reloading its pair),
// its tracer provider and the clientset of --kubeconfig traced with it. It listens on
// nothing yet: Run does. It logs with slog's default logger (Logger makes it). Errors,
// naming the flag: a file that does not load, or the kubeconfig; nothing is left
// running then.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	caPEM, err := pki.ReadCA("", o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	frontProxyCAPEM, err := pki.ReadCA("", o.RequestHeaderClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--requestheader-client-ca-file: %w", err)
	}
	servingTLS, err := pki.ServingTLS(o.TLSCertFile, o.TLSPrivateKeyFile, frontProxyCAPEM)
	if err != nil {
		return nil, err
	}
	clusterCAs, err := pki.CertPool(caPEM)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	kubeletTLS, err := pki.ReloadingClientTLS(caPEM, o.KubeletClientCertificate, o.KubeletClientKey)
	if err != nil {
		return nil, fmt.Errorf("kubelet client certificate: %w", err)
	}
	tp, _, client, err := o.Client.Clientset(ctx, "exec-proxy", "")
	if err != nil {
		return nil, err
	}
	c := &Config{
		Proxy: execproxy.Config{Client: client, KubeletTLS: kubeletTLS, Logger: slog.Default(), TracerProvider: tp,
			AllowedNames: strings.Split(o.RequestHeaderAllowedNames, ",")},
		Address: net.JoinHostPort(o.BindAddress, strconv.Itoa(o.Port)), ServingTLS: servingTLS,
		Serving: o.Serving,
	}
	if o.TunnelPort != 0 {
		c.TunnelAddress = net.JoinHostPort(o.BindAddress, strconv.Itoa(o.TunnelPort))
		c.TunnelTLS = tunnel.ServerTLS(servingTLS.Certificates[0], clusterCAs)
	}
	return c, nil
}

// Run validates o, builds its Config and runs it until ctx ends (nil then) or
// exec-proxy fails, then shuts the tracer provider down.
func (o *Options) Run(ctx context.Context) error {
	if err := o.Validate(); err != nil {
		return err
	}
	c, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(c.Proxy.TracerProvider)
	return c.Run(ctx)
}
