package scheme

import (
	"reflect"
	goruntime "runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// storedPod is a pod as the store keeps one: status, conditions and managedFields.
func storedPod() *corev1.Pod {
	pod := testPod()
	pod.UID = "u1"
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	return pod
}

// TestStorageDecodeGivesWhatTheCodecGives decodes stored objects with StorageCodec and
// with the codec it wraps (which copies the object out of the protobuf envelope first):
// the same objects, kinds and errors, on the fast path and on every way off it.
func TestStorageDecodeGivesWhatTheCodecGives(t *testing.T) {
	wrapped := StorageCodec.(storageCodec).Codec
	encode := func(obj runtime.Object) []byte {
		t.Helper()
		data, err := runtime.Encode(StorageCodec, obj)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	pod := encode(storedPod())
	deployment := encode(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}})
	podJSON, err := runtime.Encode(EncoderFor(corev1.SchemeGroupVersion), storedPod())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		into    func() runtime.Object
		wantErr bool
	}{
		{name: "pod", data: pod, into: func() runtime.Object { return &corev1.Pod{} }},
		{name: "into a pod that holds another", data: pod, into: func() runtime.Object { return storedPod() }},
		{name: "a group's kind", data: deployment, into: func() runtime.Object { return &appsv1.Deployment{} }},
		{name: "into another kind", data: pod, into: func() runtime.Object { return &corev1.Node{} }, wantErr: true},
		{name: "JSON", data: podJSON, into: func() runtime.Object { return &corev1.Pod{} }},
		{name: "truncated", data: pod[:len(pod)-3], into: func() runtime.Object { return &corev1.Pod{} }, wantErr: true},
		{name: "envelope only", data: protobufPrefix, into: func() runtime.Object { return &corev1.Pod{} }, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gotKind, gotErr := StorageCodec.Decode(tc.data, nil, tc.into())
			want, wantKind, wantErr := wrapped.Decode(tc.data, nil, tc.into())
			if (gotErr != nil) != tc.wantErr || (wantErr != nil) != tc.wantErr {
				t.Fatalf("errors: StorageCodec %v, wrapped codec %v; want an error: %v", gotErr, wantErr, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !reflect.DeepEqual(got, want) || *gotKind != *wantKind {
				t.Fatalf("StorageCodec decoded %v (%v),\nthe wrapped codec %v (%v)", got, gotKind, want, wantKind)
			}
		})
	}
}

// TestStorageDecodeReadsTheObjectInPlace pins the fast path itself: decoding a stored pod
// allocates less than the wrapped codec, which copies the pod's bytes out of the envelope.
func TestStorageDecodeReadsTheObjectInPlace(t *testing.T) {
	data, err := runtime.Encode(StorageCodec, storedPod())
	if err != nil {
		t.Fatal(err)
	}
	wrapped := StorageCodec.(storageCodec).Codec
	bytesPerDecode := func(c runtime.Decoder) uint64 {
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		const n = 100
		for range n {
			if _, _, err := c.Decode(data, nil, &corev1.Pod{}); err != nil {
				t.Fatal(err)
			}
		}
		goruntime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	fast, slow := bytesPerDecode(StorageCodec), bytesPerDecode(wrapped)
	if fast+uint64(len(data))/2 > slow {
		t.Fatalf("a stored pod's decode allocates %d B, the wrapped codec's %d B; want at least half the pod's %d bytes less", fast, slow, len(data))
	}
}

// BenchmarkDecodePod compares the wrapped codec's decode of a stored pod with
// StorageCodec's, as the etcd store decodes every object it reads or writes.
func BenchmarkDecodePod(b *testing.B) {
	data, err := runtime.Encode(StorageCodec, storedPod())
	if err != nil {
		b.Fatal(err)
	}
	for name, c := range map[string]runtime.Decoder{"wrapped": StorageCodec.(storageCodec).Codec, "StorageCodec": StorageCodec} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.Decode(data, nil, &corev1.Pod{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
