package kubelet

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/internal/tracing"
)

// startPodSpan starts the span of one pod worker step. Work that is part of the pod's
// creation (partOfCreation: the pod is still Pending in the API) continues the pod's
// trace from its skiff.dev/traceparent annotation, so the CRI calls and the status
// write land in the same trace as the create request and the scheduler's cycle; later
// work (resyncs, restarts, termination) starts its own trace linked to the pod's.
func (kl *Kubelet) startPodSpan(ctx context.Context, name string, pod *v1.Pod, partOfCreation bool) (context.Context, trace.Span) {
	attrs := trace.WithAttributes(tracing.PodAttributes(pod)...)
	if partOfCreation {
		return kl.tracer.Start(tracing.ContextWithObjectTrace(ctx, pod), name, attrs)
	}
	return kl.tracer.Start(ctx, name, attrs, tracing.LinkToObjectTrace(pod))
}
