package kubeclient_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/internal/kubeclient"
)

// TestTrimManagedFieldsLeavesItsInputAlone: an informer's transform must not modify
// what it is given (client-go may hand the same object to other handlers), so it trims a
// copy.
func TestTrimManagedFieldsLeavesItsInputAlone(t *testing.T) {
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
	}
	out, err := kubeclient.TrimManagedFields(in)
	if err != nil {
		t.Fatal(err)
	}
	trimmed, ok := out.(*corev1.Pod)
	if !ok || trimmed == in {
		t.Fatalf("got %T %p, want a *Pod other than the input %p", out, out, in)
	}
	if trimmed.ManagedFields != nil || trimmed.Name != "p" || trimmed.Labels["a"] != "b" || trimmed.Spec.Containers[0].Name != "c" {
		t.Fatalf("trimmed %+v, want the pod without its managedFields", trimmed)
	}
	if len(in.ManagedFields) != 1 {
		t.Fatalf("input's managedFields %v, want them kept", in.ManagedFields)
	}

	// Nothing to trim: the object itself, no copy.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if out, _ := kubeclient.TrimManagedFields(bare); out != any(bare) {
		t.Fatalf("got %p, want the input %p", out, bare)
	}
	// Not an object: passed through.
	if out, err := kubeclient.TrimManagedFields("x"); out != "x" || err != nil {
		t.Fatalf("got %v, %v", out, err)
	}
}
