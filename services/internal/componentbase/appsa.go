package componentbase

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

// Clientset is what a component's Options.Config builds first, as kube's
// cmd/kube-scheduler/app/options.Config does: the tracer provider of service
// (tracing.NewProvider: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set, a no-op
// otherwise), o's REST configuration traced with it (RESTConfig), and a clientset over
// that configuration. The caller shuts the provider down once the component has stopped.
// Errors, the provider shut down then: tracing's, "loading kubeconfig: …", "building
// clientset: …".
func (o *ClientOptions) Clientset(ctx context.Context, service, userAgent string) (*tracing.Provider, *rest.Config, kubernetes.Interface, error) {
	tp, err := tracing.NewProvider(ctx, tracing.Config{Service: service})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tracing: %w", err)
	}
	cfg, err := o.RESTConfig(tp, userAgent)
	if err != nil {
		_ = tp.Shutdown(context.Background())
		return nil, nil, nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = tp.Shutdown(context.Background())
		return nil, nil, nil, fmt.Errorf("building clientset: %w", err)
	}
	return tp, cfg, client, nil
}

// StartRecorder starts r delivering its events (eventrecorder.Recorder.Start) and
// returns stop, which delivers what r still holds (at most eventrecorder.DrainTimeout)
// and ends it; a component's Config.Run defers it, so every return, a leader's on a
// lost Lease included, first delivers the events recorded so far. With r nil, stop does
// nothing.
func StartRecorder(r *eventrecorder.Recorder) (stop func()) {
	if r == nil {
		return func() {}
	}
	return r.Start()
}

// MetricsRegistry is the registry a component's Config.Run registers its metrics with
// and serves on /metrics: reg when set, else a new serving.NewRegistry() (Go and process
// collectors) when serve, else nil, the metrics then not exported. It registers
// recorder's metrics (nil: none) and cs. Errors: a collector reg already holds, or one
// whose metrics collide with reg's.
func MetricsRegistry(reg *prometheus.Registry, serve bool, recorder *eventrecorder.Recorder, cs ...prometheus.Collector) (*prometheus.Registry, error) {
	if reg == nil && !serve {
		return nil, nil
	}
	if reg == nil {
		reg = serving.NewRegistry()
	}
	if recorder != nil {
		cs = append(cs, recorder.Metrics())
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// StartServing starts s's endpoints (serving.Options.Start), /metrics serving reg (nil:
// none), with opts (serving.WithLiveness, WithReadiness, WithDelegatedAuth); with s nil
// it serves nothing. Errors: Start's, as "health endpoints: …".
func StartServing(ctx context.Context, s *serving.Options, reg *prometheus.Registry, opts ...serving.Option) error {
	var gatherer prometheus.Gatherer // a nil *Registry would be a non-nil Gatherer
	if reg != nil {
		gatherer = reg
	}
	return StartServingGatherer(ctx, s, gatherer, opts...)
}

// StartServingGatherer is StartServing with /metrics answered from gatherer (nil: no
// /metrics), for a component whose metrics live in more than one registry.
func StartServingGatherer(ctx context.Context, s *serving.Options, gatherer prometheus.Gatherer, opts ...serving.Option) error {
	if s == nil {
		return nil
	}
	if _, err := s.Start(ctx, gatherer, opts...); err != nil {
		return fmt.Errorf("health endpoints: %w", err)
	}
	return nil
}
