package tracing

import (
	"os"
	"strconv"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// sampler drops client spans that start a trace: those are background polling (PLEG's
// relist over CRI, lease renewals, informer watches, the watch cache's etcd reads),
// thousands of one-span traces a minute that would bury the Pod traces in Jaeger.
// Everything else follows OTEL_TRACES_SAMPLER (default parentbased_always_on).
type sampler struct{ next sdktrace.Sampler }

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Kind == trace.SpanKindClient && !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	}
	return s.next.ShouldSample(p)
}

func (s sampler) Description() string { return "SkipRootClientSpans{" + s.next.Description() + "}" }

// samplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the SDK does
// (always_on, always_off, traceidratio and their parentbased_ forms).
func samplerFromEnv() sdktrace.Sampler {
	ratio := 1.0
	if v, err := strconv.ParseFloat(os.Getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && v >= 0 && v <= 1 {
		ratio = v
	}
	switch os.Getenv("OTEL_TRACES_SAMPLER") {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	default:
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
}
