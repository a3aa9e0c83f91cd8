package etcd3_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"skiff.dev/services/apiserver/storage"
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

func BenchmarkGetList1000Pods(b *testing.B) {
	store, prefix := newTestStore(b)
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
