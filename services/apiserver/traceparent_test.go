package apiserver_test

import (
	"context"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/tracing"
)

// headerTransport adds one header to every request.
type headerTransport struct {
	rt          http.RoundTripper
	name, value string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.rt.RoundTrip(r)
}

// With tracing off (no exporter configured), the apiserver still keeps the creating
// request's traceparent on the pod, so the services that export can continue it.
func TestPodKeepsTheCreatingRequestsTraceparent(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return headerTransport{rt: rt, name: "traceparent", value: traceparent}
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	created, err := client.CoreV1().Pods("default").Create(context.Background(), newPod("traced"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.Annotations[tracing.TraceparentAnnotation]; got != traceparent {
		t.Fatalf("annotation %s = %q, want %q", tracing.TraceparentAnnotation, got, traceparent)
	}

	// An update that drops the annotation does not lose it.
	created.Annotations = nil
	updated, err := client.CoreV1().Pods("default").Update(context.Background(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := updated.Annotations[tracing.TraceparentAnnotation]; got != traceparent {
		t.Fatalf("after update, annotation = %q, want %q", got, traceparent)
	}

	// Without a traceparent (and tracing off) there is nothing to keep.
	plain, err := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Pods("default").Create(context.Background(), newPod("plain"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := plain.Annotations[tracing.TraceparentAnnotation]; ok {
		t.Fatalf("untraced pod got annotation %q", got)
	}
}
