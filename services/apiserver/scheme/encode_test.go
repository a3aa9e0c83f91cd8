package scheme

import (
	"bytes"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
}

// recordingAllocator is a runtime.SimpleAllocator that remembers what it handed out.
type recordingAllocator struct {
	runtime.SimpleAllocator
	given []byte
}

func (a *recordingAllocator) Allocate(n uint64) []byte {
	a.given = a.SimpleAllocator.Allocate(n)
	return a.given
}

// twoWrites encodes as JSON in two writes, as an encoder without a single buffer may.
type twoWrites struct{}

func (twoWrites) Encode(obj runtime.Object, w io.Writer) error { return nil }
func (twoWrites) Identifier() runtime.Identifier               { return "two-writes" }
func (twoWrites) EncodeWithAllocator(obj runtime.Object, w io.Writer, alloc runtime.MemoryAllocator) error {
	first := alloc.Allocate(8)[:1]
	first[0] = '{'
	if _, err := w.Write(first); err != nil {
		return err
	}
	_, err := w.Write([]byte("}\n"))
	return err
}

func TestEncodeGivesWhatRuntimeEncodeGives(t *testing.T) {
	for name, enc := range map[string]runtime.Encoder{
		"storage codec (protobuf)": StorageCodec,
		"protobuf serializer":      ProtobufSerializer,
		"JSON (no allocator)":      JSONSerializer,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := runtime.Encode(enc, testPod())
			if err != nil {
				t.Fatal(err)
			}
			alloc := &recordingAllocator{}
			got, err := Encode(enc, testPod(), alloc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Encode = %q, runtime.Encode = %q", got, want)
			}
			if alloc.given != nil && &got[0] != &alloc.given[0] {
				t.Error("the bytes are a copy, want the allocator's memory itself")
			}
		})
	}
	t.Run("a codec over JSON writes from its own buffer", func(t *testing.T) {
		codec := Codecs.LegacyCodec(corev1.SchemeGroupVersion)
		first, err := Encode(codec, testPod(), &runtime.SimpleAllocator{})
		if err != nil {
			t.Fatal(err)
		}
		kept := string(first)
		other := testPod()
		other.Name, other.Spec.Containers[0].Image = "another-pod-with-a-longer-name", "registry.example/some/other/image:tag"
		if _, err := Encode(codec, other, &runtime.SimpleAllocator{}); err != nil {
			t.Fatal(err)
		}
		if string(first) != kept {
			t.Errorf("the first result changed when the codec encoded again: %q, was %q", first, kept)
		}
	})
	t.Run("more than one write", func(t *testing.T) {
		alloc := &recordingAllocator{}
		got, err := Encode(twoWrites{}, testPod(), alloc)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "{}\n" {
			t.Errorf("Encode = %q, want both writes", got)
		}
		if alloc.given[1] != 0 {
			t.Error("the second write went into the allocator's memory past the first")
		}
	})
}

// BenchmarkEncodePod compares runtime.Encode with Encode for a pod through the storage
// codec, as the etcd store encodes every write.
func BenchmarkEncodePod(b *testing.B) {
	pod := testPod()
	b.Run("runtime.Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := runtime.Encode(StorageCodec, pod); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(StorageCodec, pod, &runtime.SimpleAllocator{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
