package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkHandler measures what otelhttp adds to one request: bare, with tracing off
// (the no-op provider every service gets without OTEL_EXPORTER_OTLP_ENDPOINT) and with
// spans recorded.
func BenchmarkHandler(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	recording, err := NewProvider(context.Background(), Config{Service: "bench", Exporter: tracetest.NewNoopExporter()})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", ok},
		{"tracing-off", Handler(ok, Noop(), "bench")},
		{"tracing-on", Handler(ok, recording, "bench")},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
			req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
