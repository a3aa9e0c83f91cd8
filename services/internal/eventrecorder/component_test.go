package eventrecorder

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestForComponentReportsAsThatComponent pins that a ForComponent view queues events in
// the shared buffer with its own source.component, reportingController and
// reportingInstance (the host, as client-go's recorder reports it), while the recorder
// itself keeps its own.
func TestForComponentReportsAsThatComponent(t *testing.T) {
	r, err := New(Config{Component: "kube-controller-manager", Host: "cm-1", Client: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	r.ForComponent("replicaset-controller").Eventf(pod, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", "p")
	r.Event(pod, corev1.EventTypeNormal, "Other", "x")
	if r.Pending() != 2 {
		t.Fatalf("pending = %d, want both events in the one buffer", r.Pending())
	}
	for _, want := range []string{"replicaset-controller", "kube-controller-manager"} {
		evs := r.take(1)
		r.finish(evs, 1)
		ev := evs[0]
		if ev.Source.Component != want || ev.ReportingController != want || ev.ReportingInstance != "cm-1" || ev.Source.Host != "cm-1" {
			t.Errorf("event %s: source %+v, reportingController %q, instance %q; want component %q", ev.Reason, ev.Source, ev.ReportingController, ev.ReportingInstance, want)
		}
	}
}
