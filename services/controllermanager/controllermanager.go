// Package controllermanager is skiff's kube-controller-manager: the controllers that
// drive the cluster toward what its objects declare (node health and eviction, node
// CIDRs, pod garbage collection, workloads, Service endpoints, namespace deletion, default
// ServiceAccounts, kube-root-ca.crt, aggregated ClusterRoles), one package each, run by one process that
// holds the kube-system/kube-controller-manager Lease so that of its replicas only one
// acts. Mirrors cmd/kube-controller-manager/app.
package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/leaderelection"
)

// EventRecorders makes an event recorder per reporting component; skiff's
// eventrecorder.Recorder is one (its ForComponent shares one delivery). Mirrors kube's
// EventBroadcaster.NewRecorder with each controller's EventSource.
type EventRecorders interface {
	ForComponent(component string) record.EventRecorder
}

// discardEvents records nothing.
type discardEvents struct{}

func (discardEvents) ForComponent(string) record.EventRecorder { return &record.FakeRecorder{} }

// LeaseName is the Lease in kube-system the replicas compete for, as kube's.
const LeaseName = "kube-controller-manager"

// Config is what the controller manager runs.
type Config struct {
	// Client acts as system:kube-controller-manager (no client-side QPS limit).
	Client kubernetes.Interface
	// RESTConfig is Client's configuration; the namespace controller builds its dynamic
	// client from it (it deletes every namespaced resource discovery lists). Required
	// when the namespace controller is enabled.
	RESTConfig *rest.Config
	// RootCA is the PEM bundle root-ca-cert-publisher publishes as kube-root-ca.crt
	// (kube's --root-ca-file, by default the CA of the kubeconfig). Required when that
	// controller is enabled.
	RootCA []byte
	// Events makes each controller's event recorder, reporting under the controller's
	// kube component name (e.g. "deployment-controller"); nil records none.
	Events EventRecorders
	// Options are the controllers' flags; zero value: DefaultOptions().
	Options Options
	// LeaderElection is where and whether to elect a leader; zero value: no election.
	LeaderElection leaderelection.Options
	// Identity is the Lease holder identity; "" means "<hostname>_<uuid>".
	Identity string
	// Registerer takes the controllers' and work queues' metrics; nil: none.
	Registerer prometheus.Registerer
	// TracerProvider traces the controllers' spans; nil: none.
	TracerProvider trace.TracerProvider
	// Clock drives the controllers; nil: the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Initializers are the controllers that can run; nil: NewControllerInitializers().
	Initializers map[string]InitFunc
}

// ControllerManager runs the enabled controllers while it leads.
type ControllerManager struct {
	cfg     Config
	elector *leaderelection.Elector
	log     *slog.Logger
}

// New checks cfg and builds a ControllerManager. Errors: no client, bad options.
func New(cfg Config) (*ControllerManager, error) {
	if cfg.Client == nil {
		return nil, errors.New("controllermanager: Config.Client is required")
	}
	if cfg.Options.Controllers == nil {
		cfg.Options = DefaultOptions()
	}
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	if cfg.Events == nil {
		cfg.Events = discardEvents{}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Initializers == nil {
		cfg.Initializers = NewControllerInitializers()
	}
	cm := &ControllerManager{cfg: cfg, log: slog.Default().With("component", "controller-manager")}
	cm.elector = leaderelection.New(cfg.Client, cfg.LeaderElection, cfg.Identity)
	return cm, nil
}

// Identity is this replica's Lease holder identity.
func (cm *ControllerManager) Identity() string { return cm.elector.Identity() }

// Healthz is nil while the process is healthy: a leader that no longer renews its Lease
// in time is not (kube's leader-election healthz check).
func (cm *ControllerManager) Healthz() error { return cm.elector.Check() }

// Run campaigns for the Lease (when LeaderElection.LeaderElect) and runs the enabled
// controllers while it leads, until ctx ends. Errors: a controller failing to start,
// or leaderelection.ErrLeaderElectionLost — the caller must exit, as kube's does, so it
// never acts beside the next leader.
func (cm *ControllerManager) Run(ctx context.Context) error {
	// A controller that cannot start ends the campaign too, releasing the Lease.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var startErr error
	err := cm.elector.Run(ctx, func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if startErr = cm.StartControllers(ctx); startErr != nil {
			stop()
			return
		}
		<-ctx.Done()
	})
	return errors.Join(startErr, err)
}

// Run builds a ControllerManager from cfg and runs it (kube's app.Run).
func Run(ctx context.Context, cfg Config) error {
	cm, err := New(cfg)
	if err != nil {
		return err
	}
	return cm.Run(ctx)
}

// StartControllers starts every enabled controller with one shared informer factory,
// then starts the informers (kube's StartControllers). The controllers stop when ctx ends.
func (cm *ControllerManager) StartControllers(ctx context.Context) error {
	// The informers drop managedFields on arrival: no controller reads them.
	controllerCtx := ControllerContext{
		Client: cm.cfg.Client,
		InformerFactory: informers.NewSharedInformerFactoryWithOptions(cm.cfg.Client, informerResync,
			informers.WithTransform(kubeclient.TrimManagedFields)),
		RESTConfig:     cm.cfg.RESTConfig,
		RootCA:         cm.cfg.RootCA,
		Events:         cm.cfg.Events,
		Options:        cm.cfg.Options,
		Registerer:     cm.cfg.Registerer,
		TracerProvider: cm.cfg.TracerProvider,
		Clock:          cm.cfg.Clock,
	}
	var names []string
	for name := range cm.cfg.Initializers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !IsControllerEnabled(name, cm.cfg.Options.Controllers) {
			cm.log.Info("controller disabled", "controller", name)
			continue
		}
		if err := cm.cfg.Initializers[name](ctx, controllerCtx); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		cm.log.Info("started controller", "controller", name)
	}
	controllerCtx.InformerFactory.Start(ctx.Done())
	return nil
}
