package app

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controllermanager"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
)

// Config is what the controller manager runs with, built (kube's
// cmd/kube-controller-manager/app/config.CompletedConfig): Options.Config makes one from
// flags, the all-in-one from its own in-process identities. Client is required, and
// RESTConfig and RootCA are while their controllers are enabled.
type Config struct {
	// Client is the controllers' clientset (system:kube-controller-manager, with no
	// client-side rate limit). Required.
	Client kubernetes.Interface
	// RESTConfig is Client's configuration: the namespace controller builds its dynamic
	// client from it, the horizontal-pod-autoscaler controller its scale and metrics
	// clients, and the secure port (Serving.SecureServing) verifies client certificates
	// against its CA unless --client-ca-file names one. Required while the namespace or
	// horizontal-pod-autoscaler controller is enabled, or with a secure port.
	RESTConfig *rest.Config
	// RootCA is the PEM bundle root-ca-cert-publisher publishes in every namespace as
	// kube-root-ca.crt. Required while that controller is enabled.
	RootCA []byte
	// Recorder reports each controller's events under its own kube component name
	// (Recorder.ForComponent); Run starts it and delivers what it holds on every return
	// (callers must not run it themselves). nil records none.
	Recorder *eventrecorder.Recorder
	// TracerProvider traces the controllers' spans; nil means none. Run does not shut it
	// down.
	TracerProvider trace.TracerProvider
	// ControllerManager are the controllers' options; the zero value means
	// controllermanager.DefaultOptions().
	ControllerManager controllermanager.Options
	// Registry takes the controllers', the work queues' (workqueue_*: the first
	// registry of the process only, as client-go takes one provider) and the
	// Recorder's metrics, and is what Serving's /metrics serves; nil means a new
	// serving.NewRegistry() when Serving is set, and no metrics otherwise.
	Registry *prometheus.Registry
	// Serving, when set, is where /healthz (failing while a leader no longer renews its
	// Lease), /metrics and /debug/pprof are served (serving.Options.Start); nil serves
	// none.
	Serving *serving.Options
	// LeaderElection, when set with LeaderElect, makes Run start the controllers only
	// while holding its Lease (kube-system/kube-controller-manager by default); nil, or
	// LeaderElect false, runs at once, alone, with no Lease.
	LeaderElection *leaderelection.Options
}

// Run builds the controller manager and runs the enabled controllers until ctx ends
// (nil then), under leader election when LeaderElection asks for it, with its
// endpoints when Serving is set. Errors, wrapped with what failed: no Client or bad
// options ("controller manager"), an endpoint that cannot listen ("health endpoints"),
// a controller failing to start, or leaderelection.ErrLeaderElectionLost ("controller
// manager stopped"): the caller must exit then, so it never acts beside the next
// leader.
func (c *Config) Run(ctx context.Context) error {
	// Every return from here on, a leader's on a lost Lease included, first delivers the
	// events recorded so far.
	defer componentbase.StartRecorder(c.Recorder)()
	registry, err := componentbase.MetricsRegistry(c.Registry, c.Serving != nil, c.Recorder)
	if err != nil {
		return err
	}
	cmConfig := controllermanager.Config{
		Client: c.Client, RESTConfig: c.RESTConfig, RootCA: c.RootCA, Options: c.ControllerManager,
		TracerProvider: c.TracerProvider,
	}
	if c.Recorder != nil {
		cmConfig.Events = c.Recorder
	}
	if c.LeaderElection != nil {
		cmConfig.LeaderElection = *c.LeaderElection
	}
	var gatherer prometheus.Gatherer // a nil *Registry would be a non-nil Gatherer
	if registry != nil {
		cmConfig.Registerer = registry
		gatherer = prometheus.Gatherers{registry, controllermanager.WorkqueueMetrics}
	}
	cm, err := controllermanager.New(cmConfig)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	if err := componentbase.StartServingGatherer(ctx, c.Serving, gatherer, serving.WithLiveness(cm.Healthz), serving.WithDelegatedAuth(c.Client, c.RESTConfig)); err != nil {
		return err
	}
	if err := cm.Run(ctx); err != nil {
		return fmt.Errorf("controller manager stopped: %w", err)
	}
	return nil
}
