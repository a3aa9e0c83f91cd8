package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TraceparentAnnotation holds the W3C traceparent of the request that created an object,
// which carries the trace across a watch. The apiserver sets it on pod create; the
// scheduler and the kubelet continue that trace when they act on the pod.
const TraceparentAnnotation = "skiff.dev/traceparent"

// InjectTraceparent stores the traceparent of ctx's span in obj's annotations, keeping
// one the client already sent. It does nothing when ctx carries no valid span.
func InjectTraceparent(ctx context.Context, obj metav1.Object) {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	if tp == "" {
		return
	}
	ann := obj.GetAnnotations()
	if _, ok := ann[TraceparentAnnotation]; ok {
		return
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[TraceparentAnnotation] = tp
	obj.SetAnnotations(ann)
}

// SpanContextFrom returns the remote span context stored in obj's traceparent
// annotation; it is invalid when the annotation is missing or malformed.
func SpanContextFrom(obj metav1.Object) trace.SpanContext {
	tp := obj.GetAnnotations()[TraceparentAnnotation]
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// ContextWithObjectTrace returns ctx with obj's stored trace as the remote parent, so the
// next span started from it continues the object's trace. Without a valid annotation ctx
// is returned unchanged.
func ContextWithObjectTrace(ctx context.Context, obj metav1.Object) context.Context {
	sc := SpanContextFrom(obj)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// LinkToObjectTrace returns a span start option linking to obj's stored trace, for work
// that follows up on the object (a deletion, a restart) without being part of its
// creation; without a valid annotation the option adds nothing.
func LinkToObjectTrace(obj metav1.Object) trace.SpanStartOption {
	sc := SpanContextFrom(obj)
	if !sc.IsValid() {
		return trace.WithLinks()
	}
	return trace.WithLinks(trace.Link{SpanContext: sc})
}

// PodAttributes are the OTel semantic-convention attributes of pod: k8s.pod.name,
// k8s.pod.uid, k8s.namespace.name and, once bound, k8s.node.name.
func PodAttributes(pod *corev1.Pod) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.K8SPodName(pod.Name),
		semconv.K8SPodUID(string(pod.UID)),
		semconv.K8SNamespaceName(pod.Namespace),
	}
	if pod.Spec.NodeName != "" {
		attrs = append(attrs, semconv.K8SNodeName(pod.Spec.NodeName))
	}
	return attrs
}
