package endpoints

import (
	"bytes"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var coreV1 = schema.GroupVersion{Version: "v1"}

func benchPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", ResourceVersion: fmt.Sprint(1000 + i),
			Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{NodeName: "hollow-1", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

// TestEncodingCache checks that a cached encoding is the object's encoding, that the
// same object is encoded once per group version, and that the oldest entry goes first.
func TestEncodingCache(t *testing.T) {
	c := newEncodingCache(2)
	p1, p2, p3 := benchPod(1), benchPod(2), benchPod(3)
	want, err := runtime.Encode(encoderFor(p1, coreV1), p1)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.encode(p1, coreV1, false)
	if err != nil || !bytes.Equal(first, want) {
		t.Fatalf("encode = %s, %v; want %s", first, err, want)
	}
	again, _ := c.encode(p1, coreV1, false)
	if &again[0] != &first[0] {
		t.Error("the second watcher of an object encoded it again")
	}
	// An equal object at another address is another object (the watch cache's next
	// version of it, say): it is not served from p1's entry.
	if _, ok := c.entries[encodingKey{obj: p1.DeepCopy(), gv: coreV1}]; ok {
		t.Error("a copy of p1 hit p1's entry")
	}
	if _, err := c.encode(p2, coreV1, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.encode(p3, coreV1, false); err != nil { // evicts p1
		t.Fatal(err)
	}
	if _, ok := c.entries[encodingKey{obj: p1, gv: coreV1}]; ok || len(c.entries) != 2 {
		t.Errorf("after 3 objects in a cache of 2: p1 kept %v, %d entries", ok, len(c.entries))
	}
}

// BenchmarkWatchEncoding is one pod event delivered to 4 watchers (scheduler,
// controller manager, the node's kubelet, one more), encoded per watcher as before
// ("per-watcher") or once and shared ("shared").
func BenchmarkWatchEncoding(b *testing.B) {
	const watchers = 4
	pods := make([]*corev1.Pod, 1024)
	for i := range pods {
		pods[i] = benchPod(i)
	}
	b.Run("per-watcher", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p := pods[i%len(pods)]
			for range watchers {
				if _, err := runtime.Encode(encoderFor(p, coreV1), p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		c := newEncodingCache(watchEncodingCacheSize)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p := pods[i%len(pods)]
			for range watchers {
				if _, err := c.encode(p, coreV1, false); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
