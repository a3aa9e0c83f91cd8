package componentbase

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// ShutdownTracing flushes the spans tp still buffers and stops its exporter, when tp
// can be shut down (a *tracing.Provider, the SDK's provider); nil and other providers
// are left alone. Options.Run calls it on the provider its Config made, once the
// component has stopped; errors (an exporter that cannot be reached) are dropped, as
// the process is ending.
func ShutdownTracing(tp trace.TracerProvider) {
	if s, ok := tp.(interface{ Shutdown(context.Context) error }); ok {
		_ = s.Shutdown(context.Background())
	}
}
