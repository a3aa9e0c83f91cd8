// Package app is csr-signer's command, in the shape of kube's
// cmd/kube-controller-manager/app (whose csrapproving and csrsigning controllers it
// stands for): Options (the flags) → Config (the built client, CA, recorder and
// endpoints) → Run. services/cmd/csr-signer parses the flags and calls Options.Run; the
// all-in-one builds a Config itself, from its in-process identities, and calls
// Config.Run.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
)

// Options are csr-signer's flags.
type Options struct {
	// PKIDir is --pki-dir: the directory `skiff pki init` made, holding the cluster CA
	// (ca.crt, ca.key). Required.
	PKIDir string
	// Client is --kubeconfig (the system:skiff:csr-signer identity; "" means
	// <PKIDir>/csr-signer.kubeconfig), --kube-api-content-type, --kube-api-qps and
	// --kube-api-burst (client-go's defaults: JSON, 5 QPS, burst 10).
	Client componentbase.ClientOptions
	// AutoApprove is --auto-approve: approve kubelet client requests that fit
	// Kubernetes' rules; false leaves every request to a person.
	AutoApprove bool
	// ApproveKubeletServing is --approve-kubelet-serving: with AutoApprove, also approve
	// kubelet serving requests for the node's own addresses (csrsigner.Config).
	ApproveKubeletServing bool
	// ServiceClusterIPRange is --service-cluster-ip-range, a CIDR: no serving
	// certificate is approved for its IPs.
	ServiceClusterIPRange string
	// ControlPlaneHosts is --control-plane-host (repeatable): DNS names and IPs never
	// approved in a serving certificate, besides csrsigner.DefaultControlPlaneHosts().
	ControlPlaneHosts []string
	// MaxDuration is --max-duration: the longest lifetime of an issued certificate.
	MaxDuration time.Duration
	// NATS is --nats-url and the mutual TLS toward it, where Events go.
	NATS componentbase.NATSOptions
	// Serving is --log-level, --log-format, the plain-HTTP --health-address and
	// --metrics-bind-address, --profiling, and the secure port (--secure-port 10260 and
	// its TLS and delegated-auth flags).
	Serving *serving.Options
}

// NewOptions are csr-signer's defaults: auto-approval of kubelet client requests on,
// of serving requests off (as kube-controller-manager), csrsigner's service range and
// maximum duration, client-go's client defaults, and, as kube-controller-manager whose
// job csr-signer does, /metrics and /debug/pprof only on the secure port 10260, to
// callers the apiserver authenticates and authorizes (plain HTTP off unless
// --health-address asks for it).
func NewOptions() *Options {
	srv := serving.NewOptions("")
	srv.SecureServing = serving.NewSecureServingOptions(10260)
	return &Options{
		AutoApprove:           true,
		ServiceClusterIPRange: csrsigner.DefaultServiceClusterIPRange.String(),
		MaxDuration:           csrsigner.DefaultMaxDuration,
		Serving:               srv,
	}
}

// AddFlags registers o's flags on fs, defaulting to o's values.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.PKIDir, "pki-dir", o.PKIDir, "directory made by skiff pki init, holding the cluster CA (ca.crt, ca.key); required")
	o.Client.AddFlags(fs, "kubeconfig of the system:skiff:csr-signer identity; empty means <pki-dir>/csr-signer.kubeconfig")
	fs.BoolVar(&o.AutoApprove, "auto-approve", o.AutoApprove, "auto-approve kubelet client requests that fit Kubernetes' rules; false leaves every request to kubectl certificate approve|deny")
	fs.BoolVar(&o.ApproveKubeletServing, "approve-kubelet-serving", o.ApproveKubeletServing, "with --auto-approve, also approve a kubelet's serving certificate request when its SANs are all the node's own name, Hostname/InternalDNS and InternalIP addresses and none is loopback, link-local, in --service-cluster-ip-range, a control-plane host (or an IP one resolves to) or another node's; false leaves them to a person, as kube-controller-manager does")
	fs.StringVar(&o.ServiceClusterIPRange, "service-cluster-ip-range", o.ServiceClusterIPRange, "the Services' cluster IP range (the apiserver's --service-cluster-ip-range): no serving certificate is approved for its IPs")
	fs.Var((*stringList)(&o.ControlPlaneHosts), "control-plane-host", "DNS name or IP of the control plane never approved in a kubelet serving certificate, nor any IP the name resolves to (repeatable); adds to "+strings.Join(csrsigner.DefaultControlPlaneHosts(), ","))
	fs.DurationVar(&o.MaxDuration, "max-duration", o.MaxDuration, "longest lifetime of an issued certificate; a request's spec.expirationSeconds may ask for less (not under 10m)")
	o.NATS.AddFlags(fs)
	o.Serving.AddFlags(fs)
}

// Validate reports the first unusable flag value as a componentbase.UsageError (exit
// code 2): no --pki-dir, a --service-cluster-ip-range that is no CIDR, or Serving's.
func (o *Options) Validate() error {
	if o.PKIDir == "" {
		return componentbase.Usagef(errors.New("--pki-dir is required"))
	}
	if _, err := netip.ParsePrefix(o.ServiceClusterIPRange); err != nil {
		return componentbase.Usagef(fmt.Errorf("--service-cluster-ip-range: %w", err))
	}
	return componentbase.Usagef(o.Serving.Validate())
}

// Logger makes the logger Serving describes slog's default and returns it; on invalid
// Serving options it exits 2 (serving.Options.Logger).
func (o *Options) Logger() *slog.Logger { return o.Serving.Logger("csr-signer") }

// Config builds what csr-signer runs with: the cluster CA of PKIDir, its tracer
// provider, the clientset of --kubeconfig traced with it, and the event recorder (over
// NATS with --nats-url); it logs with slog's default logger (Logger makes it). Errors:
// Validate's, or a CA, kubeconfig, TLS file or tracing configuration that does not
// load; nothing is left running then.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	serviceRange, _ := netip.ParsePrefix(o.ServiceClusterIPRange)
	ca, err := pki.LoadCA(o.PKIDir)
	if err != nil {
		return nil, fmt.Errorf("loading the cluster CA: %w", err)
	}
	client := o.Client
	if client.Kubeconfig == "" {
		client.Kubeconfig = filepath.Join(o.PKIDir, pki.CSRSigner.Name+".kubeconfig")
	}
	tp, restConfig, clientset, err := client.Clientset(ctx, "csr-signer", "")
	if err != nil {
		return nil, err
	}
	recorder, err := o.NATS.Recorder("csr-signer", restConfig, clientset)
	if err != nil {
		componentbase.ShutdownTracing(tp)
		return nil, fmt.Errorf("event recorder: %w", err)
	}
	return &Config{
		Client: clientset, RESTConfig: restConfig, CA: ca, AutoApprove: o.AutoApprove, ApproveKubeletServing: o.ApproveKubeletServing,
		ServiceClusterIPRange: serviceRange, ControlPlaneHosts: o.ControlPlaneHosts, MaxDuration: o.MaxDuration,
		Logger: slog.Default(), Recorder: recorder, Serving: o.Serving, tracing: tp,
	}, nil
}

// Run validates o, builds its Config and runs it until ctx ends (nil then) or
// csr-signer fails, then shuts the tracer provider down.
func (o *Options) Run(ctx context.Context) error {
	c, err := o.Config(ctx)
	if err != nil {
		return err
	}
	defer componentbase.ShutdownTracing(c.tracing)
	return c.Run(ctx)
}

// stringList is a repeatable string flag: each use appends its value.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
