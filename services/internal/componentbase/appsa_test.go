package componentbase

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/internal/eventrecorder"
)

func TestClientsetBadKubeconfig(t *testing.T) {
	o := NewClientOptions(0, 0)
	o.Kubeconfig = t.TempDir() + "/missing.kubeconfig"
	if _, _, _, err := o.Clientset(context.Background(), "test", ""); err == nil || !strings.HasPrefix(err.Error(), "loading kubeconfig: ") {
		t.Fatalf("Clientset with a missing kubeconfig = %v, want a loading kubeconfig error", err)
	}
}

func TestMetricsRegistry(t *testing.T) {
	if reg, err := MetricsRegistry(nil, false, nil); reg != nil || err != nil {
		t.Fatalf("MetricsRegistry with nothing to serve = %v, %v; want nil, nil", reg, err)
	}
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "test", Client: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := MetricsRegistry(nil, true, recorder)
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goRuntime, events bool
	for _, f := range families {
		goRuntime = goRuntime || strings.HasPrefix(f.GetName(), "go_")
		events = events || strings.Contains(f.GetName(), "event")
	}
	if !goRuntime || !events {
		t.Errorf("served registry: go_* %v, events %v; want both", goRuntime, events)
	}
	// The same collector twice is refused rather than a panic.
	own := prometheus.NewRegistry()
	if _, err := MetricsRegistry(own, false, recorder); err != nil {
		t.Fatal(err)
	}
	if _, err := MetricsRegistry(own, false, recorder); err == nil {
		t.Error("registering the recorder's metrics twice succeeded")
	}
}

func TestNilPartsAreOff(t *testing.T) {
	StartRecorder(nil)()
	if err := StartServing(context.Background(), nil, nil); err != nil {
		t.Fatalf("StartServing(nil) = %v", err)
	}
}
