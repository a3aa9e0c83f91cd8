package etcd3_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/etcd3"
)

func BenchmarkCreate(b *testing.B) {
	store, prefix := newTestStore(b)
	ctx := testContext(b)
	out := &corev1.Pod{}
	i := 0
	for b.Loop() {
		pod := newPod(b, fmt.Sprintf("pod-%d", i), "node-1")
		if err := store.Create(ctx, prefix+pod.Name, pod, out); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkGetList1000Pods lists 1,000 pods stored as the apiserver stores them
// (protobuf, scheme.StorageCodec).
func BenchmarkGetList1000Pods(b *testing.B) {
	_, prefix := newTestStore(b)
	store := etcd3.New(testClient, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
	for i := range 1000 {
		createPod(b, store, prefix, newPod(b, fmt.Sprintf("pod-%04d", i), "node-1"))
	}
	ctx := testContext(b)
	for b.Loop() {
		list := &corev1.PodList{}
		if err := store.GetList(ctx, prefix, storage.ListOptions{}, list); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) != 1000 {
			b.Fatalf("%d items, want 1000", len(list.Items))
		}
	}
}
