package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newTestProvider(t *testing.T, service string) (*Provider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := NewProvider(context.Background(), Config{Service: service, NodeName: "node-a", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, exp
}

func TestNoEndpointIsNoop(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	p, err := NewProvider(context.Background(), Config{Service: "scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() {
		t.Fatal("provider enabled without an endpoint")
	}
	_, span := p.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() {
		t.Fatal("no-op provider records spans")
	}
}

func TestResourceNamesTheService(t *testing.T) {
	p, exp := newTestProvider(t, "kubelet")
	_, span := p.Tracer("x").Start(context.Background(), "SyncPod")
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1", len(spans))
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Resource.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["service.name"] != "skiff-kubelet" || attrs["k8s.node.name"] != "node-a" || attrs["service.version"] == "" {
		t.Fatalf("resource attributes = %v", attrs)
	}
}

func TestTraceparentAnnotationContinuesTheTrace(t *testing.T) {
	p, exp := newTestProvider(t, "apiserver")
	ctx, create := p.Tracer("x").Start(context.Background(), "POST pods")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	InjectTraceparent(ctx, pod)
	create.End()
	if pod.Annotations[TraceparentAnnotation] == "" {
		t.Fatal("no traceparent annotation")
	}

	// A client-sent annotation is kept.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	InjectTraceparent(ctx, other)
	if got := other.Annotations[TraceparentAnnotation]; got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("client annotation replaced by %q", got)
	}

	_, child := p.Tracer("x").Start(ContextWithObjectTrace(context.Background(), pod), "SchedulingCycle", trace.WithAttributes(PodAttributes(pod)...))
	child.End()
	_, linked := p.Tracer("x").Start(context.Background(), "SyncTerminatingPod", LinkToObjectTrace(pod))
	linked.End()

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want 3", len(spans))
	}
	root, cycle, term := spans[0], spans[1], spans[2]
	if cycle.Parent.SpanID() != root.SpanContext.SpanID() || cycle.SpanContext.TraceID() != root.SpanContext.TraceID() {
		t.Errorf("cycle is not a child of the create span")
	}
	if term.SpanContext.TraceID() == root.SpanContext.TraceID() || len(term.Links) != 1 || term.Links[0].SpanContext.SpanID() != root.SpanContext.SpanID() {
		t.Errorf("termination span should start its own trace linked to the create span: %+v", term.Links)
	}
}

func TestMalformedAnnotationStartsANewTrace(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{TraceparentAnnotation: "garbage"}}}
	if SpanContextFrom(pod).IsValid() {
		t.Fatal("garbage annotation parsed as a span context")
	}
	ctx := context.Background()
	if ContextWithObjectTrace(ctx, pod) != ctx {
		t.Fatal("context changed for a malformed annotation")
	}
}

func TestSamplerDropsRootClientSpans(t *testing.T) {
	s := sampler{next: sdktrace.AlwaysSample()}
	cases := []struct {
		name   string
		kind   trace.SpanKind
		parent bool
		want   sdktrace.SamplingDecision
	}{
		{"root client span (background polling)", trace.SpanKindClient, false, sdktrace.Drop},
		{"client span inside a trace", trace.SpanKindClient, true, sdktrace.RecordAndSample},
		{"root server span", trace.SpanKindServer, false, sdktrace.RecordAndSample},
		{"root internal span", trace.SpanKindInternal, false, sdktrace.RecordAndSample},
	}
	parent := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled,
	}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.parent {
				ctx = parent
			}
			if got := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, Kind: c.kind}).Decision; got != c.want {
				t.Fatalf("decision = %v, want %v", got, c.want)
			}
		})
	}
}

func TestTracingOffStillPropagates(t *testing.T) {
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var seen trace.SpanContext
	h := Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen = trace.SpanContextFromContext(r.Context())
	}), Noop(), "test")
	req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", nil)
	req.Header.Set("traceparent", traceparent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if seen.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("handler saw trace %s", seen.TraceID())
	}

	var sent string
	rt := WrapTransport(Noop())(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header.Get("traceparent")
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	out, _ := http.NewRequestWithContext(trace.ContextWithRemoteSpanContext(context.Background(), seen), http.MethodGet, "http://x/", nil)
	if _, err := rt.RoundTrip(out); err != nil {
		t.Fatal(err)
	}
	if sent != traceparent {
		t.Fatalf("transport sent traceparent %q, want %q", sent, traceparent)
	}
	if out.Header.Get("traceparent") != "" {
		t.Fatal("transport modified the caller's request")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
