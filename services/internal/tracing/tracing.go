// Package tracing sets up OpenTelemetry for a skiff service and carries a Pod's trace
// across the watch boundary in the annotation skiff.dev/traceparent, so one Pod's whole
// life (create → schedule → bind → sandbox → containers → Running) is one trace.
//
// Exporting follows the standard OTEL_* environment variables of the OTLP exporter and
// the SDK (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_INSECURE, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
// OTEL_RESOURCE_ATTRIBUTES, ...), except that client spans starting a trace (background
// polling: PLEG relists, lease renewals, watches) are never sampled. With no endpoint set a Provider is OpenTelemetry's
// no-op provider: spans cost nothing and nothing is exported, while W3C trace context
// still propagates through every hop.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Propagator is W3C trace context plus baggage. skiff's HTTP and gRPC instrumentation
// uses it whatever the global propagator is, so a traceparent crosses every hop even
// in a process that never called NewProvider (tests, tools).
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Config names the service a Provider traces for.
type Config struct {
	// Service is the short service name ("apiserver", "scheduler", "kubelet",
	// "runtime"); the resource's service.name is "skiff-" + Service.
	Service string
	// NodeName, when set (kubelets, runtimes), becomes the resource attribute
	// k8s.node.name.
	NodeName string
	// Exporter, when set, receives every span synchronously instead of OTLP (tests use
	// tracetest.InMemoryExporter).
	Exporter sdktrace.SpanExporter
}

// Provider is one service's TracerProvider. The all-in-one builds one per service, so
// each service's spans carry their own service.name even in one process.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p.shutdown != nil }

// Shutdown flushes buffered spans and stops the exporter; a no-op provider returns nil.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Noop is a provider that records nothing.
func Noop() *Provider { return &Provider{TracerProvider: noop.NewTracerProvider()} }

// Endpoint returns the OTLP endpoint configured in the environment ("" when tracing is
// off): OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT.
func Endpoint() string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// NewProvider builds the TracerProvider of cfg.Service and installs the W3C trace-context
// and baggage propagators globally. It exports over OTLP/gRPC when an endpoint is set in
// the environment, to cfg.Exporter when given, and is a no-op otherwise. Errors: an
// invalid resource or exporter configuration.
func NewProvider(ctx context.Context, cfg Config) (*Provider, error) {
	otel.SetTextMapPropagator(Propagator)
	if cfg.Service == "" {
		return nil, errors.New("tracing: Config.Service is required")
	}
	if cfg.Exporter == nil && Endpoint() == "" {
		return Noop(), nil
	}
	attrs := []attribute.KeyValue{semconv.ServiceName("skiff-" + cfg.Service), semconv.ServiceVersion(Version())}
	if cfg.NodeName != "" {
		attrs = append(attrs, semconv.K8SNodeName(cfg.NodeName))
	}
	// Attributes given in code come last so OTEL_RESOURCE_ATTRIBUTES cannot rename the
	// service: service.name is how Jaeger tells the hops apart.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithAttributes(attrs...))
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler{next: samplerFromEnv()})}
	if cfg.Exporter != nil {
		opts = append(opts, sdktrace.WithSyncer(cfg.Exporter))
	} else {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
}

// Version is skiff's module version from the build info ("devel" for a local build).
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Tracer returns the named tracer of tp, or of the global provider when tp is nil.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(name)
}

// Handler wraps an HTTP server's handler in otelhttp: one server span per request,
// continuing the caller's traceparent, named "<METHOD> <path>". With tracing off (a no-op
// Provider) it only puts the caller's traceparent into the request's context, so the
// trace still reaches what the request stores (a pod's skiff.dev/traceparent).
func Handler(h http.Handler, tp trace.TracerProvider, operation string) http.Handler {
	if isNoop(tp) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			h.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(h, operation, otelhttp.WithTracerProvider(orGlobal(tp)), otelhttp.WithPropagators(Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}

// WrapTransport returns a client-go rest.Config.WrapTransport that traces every request
// and injects the traceparent header: a client span per request, named "<METHOD> <path>".
// With tracing off (a no-op Provider) it only injects the traceparent of the request's
// context, when there is one.
func WrapTransport(tp trace.TracerProvider) func(http.RoundTripper) http.RoundTripper {
	if isNoop(tp) {
		return func(rt http.RoundTripper) http.RoundTripper { return propagatingTransport{rt} }
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(orGlobal(tp)), otelhttp.WithPropagators(Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
	}
}

// GRPCClientOption traces a gRPC client's calls (CRI, etcd): a client span per RPC named
// after the full method, e.g. "runtime.v1.RuntimeService/RunPodSandbox"; nil tp means
// the global provider. With tracing off it adds nothing: otelgrpc's stats handler costs
// a context, attributes and metadata per call even over a no-op provider, and no span
// would carry the trace on.
func GRPCClientOption(tp trace.TracerProvider) grpc.DialOption {
	if isNoop(orGlobal(tp)) {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(orGlobal(tp)), otelgrpc.WithPropagators(Propagator)))
}

// GRPCServerOption traces a gRPC server's calls (the built-in CRI runtimes); nil tp
// means the global provider. With tracing off it adds nothing, as GRPCClientOption.
func GRPCServerOption(tp trace.TracerProvider) grpc.ServerOption {
	if isNoop(orGlobal(tp)) {
		return grpc.EmptyServerOption{}
	}
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(orGlobal(tp)), otelgrpc.WithPropagators(Propagator)))
}

// isNoop reports whether tp is known to record nothing: then the HTTP wrappers only
// propagate, at the cost of a header lookup.
func isNoop(tp trace.TracerProvider) bool {
	switch p := tp.(type) {
	case *Provider:
		return !p.Enabled()
	case noop.TracerProvider:
		return true
	}
	return false
}

// propagatingTransport injects the traceparent of the request's context.
type propagatingTransport struct{ rt http.RoundTripper }

func (t propagatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		r = r.Clone(r.Context())
		Propagator.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.rt.RoundTrip(r)
}

func orGlobal(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

// RecordError marks span as failed with err (status Error plus an exception event); a
// nil err leaves the span unchanged.
func RecordError(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
