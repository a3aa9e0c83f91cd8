package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/csrsigner"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

// Config is what csr-signer runs with, built: Options.Config makes one from flags, the
// all-in-one from its own in-process identities. Client and CA are required. The
// fields from Client to Logger are csrsigner.Config's.
type Config struct {
	// Client reaches the apiserver as system:skiff:csr-signer: it watches
	// CertificateSigningRequests, approves and signs them. Required.
	Client kubernetes.Interface
	// RESTConfig is Client's configuration: the secure port (Serving.SecureServing)
	// verifies client certificates against its CA unless --client-ca-file names one.
	// Required with a secure port; unused otherwise.
	RESTConfig *rest.Config
	// CA is the cluster CA that signs (pki.LoadCA). Required.
	CA *pki.CA
	// AutoApprove turns the approver on; false leaves every request to a person.
	AutoApprove bool
	// ApproveKubeletServing, with AutoApprove, approves kubelet serving requests for the
	// node's own addresses (csrsigner.Config.ApproveKubeletServing).
	ApproveKubeletServing bool
	// ServiceClusterIPRange is the Services' cluster IP range, none of whose IPs is
	// approved in a serving certificate; the zero Prefix means
	// csrsigner.DefaultServiceClusterIPRange.
	ServiceClusterIPRange netip.Prefix
	// ControlPlaneHosts are DNS names and IPs of the control plane never approved in a
	// serving certificate, besides csrsigner.DefaultControlPlaneHosts().
	ControlPlaneHosts []string
	// Resolver resolves the control-plane host names; nil means net.DefaultResolver.
	Resolver csrsigner.Resolver
	// MaxDuration caps issued lifetimes; 0 means csrsigner.DefaultMaxDuration (1 year).
	MaxDuration time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Recorder reports events on the requests (Approved, WaitingForApproval, Issued,
	// SignerValidationFailure); Run starts it and delivers what it holds on every return
	// (callers must not run it themselves). nil records none.
	Recorder *eventrecorder.Recorder
	// Registry takes csr-signer's metrics and the Recorder's, and is what Serving's
	// /metrics serves; nil means a new serving.NewRegistry() when Serving is set, and no
	// metrics otherwise.
	Registry *prometheus.Registry
	// Serving, when set, is where /readyz (ready once the informers have synced),
	// /metrics and /debug/pprof are served (serving.Options.Start); nil serves none.
	Serving *serving.Options

	// tracing is the provider Options.Config made, which Options.Run shuts down; nil in
	// a Config built directly.
	tracing *tracing.Provider
}

// Run builds csr-signer and runs it until ctx ends (nil then), with its endpoints when
// Serving is set. Errors, wrapped with what failed: no Client or CA ("building
// csr-signer"), an endpoint that cannot listen ("health endpoints"), or the controller
// failing ("csr-signer stopped").
func (c *Config) Run(ctx context.Context) error {
	defer componentbase.StartRecorder(c.Recorder)()
	signerConfig := csrsigner.Config{
		Client: c.Client, CA: c.CA, AutoApprove: c.AutoApprove, ApproveKubeletServing: c.ApproveKubeletServing,
		ServiceClusterIPRange: c.ServiceClusterIPRange, ControlPlaneHosts: c.ControlPlaneHosts, Resolver: c.Resolver,
		MaxDuration: c.MaxDuration, Logger: c.Logger,
	}
	if c.Recorder != nil {
		signerConfig.Recorder = c.Recorder
	}
	controller, err := csrsigner.New(signerConfig)
	if err != nil {
		return fmt.Errorf("building csr-signer: %w", err)
	}
	registry, err := componentbase.MetricsRegistry(c.Registry, c.Serving != nil, c.Recorder, controller.Metrics())
	if err != nil {
		return err
	}
	if err := componentbase.StartServing(ctx, c.Serving, registry, serving.WithReadiness(controller.Ready), serving.WithDelegatedAuth(c.Client, c.RESTConfig)); err != nil {
		return err
	}
	if err := controller.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("csr-signer stopped: %w", err)
	}
	return nil
}
