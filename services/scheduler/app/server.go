package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/leaderelection"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/scheduler"
)

// Config is what the scheduler runs with, built (kube's
// cmd/kube-scheduler/app/config.CompletedConfig): Options.Config makes one from flags,
// the all-in-one from its own in-process identities. Only Client is required.
type Config struct {
	// Client is the scheduler's clientset (system:kube-scheduler): it lists and watches
	// pods and nodes, binds, and holds the Lease. Required.
	Client kubernetes.Interface
	// RESTConfig is Client's configuration: the secure port (Serving.SecureServing)
	// verifies client certificates against its CA unless --client-ca-file names one.
	// Required with a secure port; unused otherwise.
	RESTConfig *rest.Config
	// SchedulerName selects the pods scheduled, those whose spec.schedulerName is it;
	// "" means scheduler.DefaultSchedulerName.
	SchedulerName string
	// Recorder reports Scheduled and FailedScheduling on pods; Run starts it and
	// delivers what it holds on every return (callers must not run it themselves). nil
	// records none.
	Recorder *eventrecorder.Recorder
	// TracerProvider traces each scheduling cycle inside the pod's trace; nil means the
	// global provider. Run does not shut it down.
	TracerProvider trace.TracerProvider
	// Registry takes the scheduler's metrics (scheduler_*) and the Recorder's, and is
	// what Serving's /metrics serves; nil means a new serving.NewRegistry() when Serving
	// is set, and no metrics otherwise.
	Registry *prometheus.Registry
	// Serving, when set, is where /healthz (failing while a leader no longer renews its
	// Lease), /metrics and /debug/pprof are served (serving.Options.Start); nil serves
	// none.
	Serving *serving.Options
	// LeaderElection, when set with LeaderElect, makes Run schedule only while holding
	// its Lease (kube-system/kube-scheduler by default); nil, or LeaderElect false, runs
	// at once, alone, with no Lease.
	LeaderElection *leaderelection.Options
}

// Run builds the scheduler and runs it until ctx ends (nil then), under leader election
// when LeaderElection asks for it, with its endpoints when Serving is set. Errors,
// wrapped with what failed: no Client ("building scheduler"), an endpoint that cannot
// listen ("health endpoints"), the scheduler failing, or
// leaderelection.ErrLeaderElectionLost ("scheduler stopped"): the caller must exit then,
// so it never binds beside the next leader.
func (c *Config) Run(ctx context.Context) error {
	// Every return from here on, a leader's on a lost Lease included, first delivers the
	// events recorded so far.
	defer componentbase.StartRecorder(c.Recorder)()
	schedConfig := scheduler.Config{Client: c.Client, SchedulerName: c.SchedulerName, TracerProvider: c.TracerProvider}
	if c.Recorder != nil {
		schedConfig.Recorder = c.Recorder
	}
	sched, err := scheduler.New(schedConfig)
	if err != nil {
		return fmt.Errorf("building scheduler: %w", err)
	}
	var election leaderelection.Options
	if c.LeaderElection != nil {
		election = *c.LeaderElection
	}
	elector := leaderelection.New(c.Client, election, "")
	registry, err := componentbase.MetricsRegistry(c.Registry, c.Serving != nil, c.Recorder, sched.Metrics())
	if err != nil {
		return err
	}
	if err := componentbase.StartServing(ctx, c.Serving, registry, serving.WithLiveness(elector.Check), serving.WithDelegatedAuth(c.Client, c.RESTConfig)); err != nil {
		return err
	}
	// A scheduler that fails while leading ends the campaign, releasing the Lease.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var schedErr error
	err = elector.Run(ctx, func(ctx context.Context) {
		if err := sched.Run(ctx); err != nil && ctx.Err() == nil {
			schedErr = err
			cancel()
		}
	})
	if err = errors.Join(schedErr, err); err != nil {
		return fmt.Errorf("scheduler stopped: %w", err)
	}
	return nil
}
