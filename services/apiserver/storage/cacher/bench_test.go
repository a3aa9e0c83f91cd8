package cacher_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
)

// benchFixture fills a fresh prefix with pods spread over nodes and starts a cache on it.
func benchFixture(b *testing.B, pods, nodes int) (*etcd3.Store, *cacher.Cacher, string) {
	b.Helper()
	prefix := fmt.Sprintf("/%s/%d/pods/", b.Name(), time.Now().UnixNano())
	store := etcd3.New(etcdClient, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
	for i := 0; i < pods; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%nodes), Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := store.Create(context.Background(), prefix+"default/"+pod.Name, pod, nil); err != nil {
			b.Fatal(err)
		}
	}
	c, err := cacher.New(cacher.Config{Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: prefix,
		NewFunc: func() runtime.Object { return &corev1.Pod{} }, NewListFunc: func() runtime.Object { return &corev1.PodList{} },
		GetAttrs: podAttrs, IndexFields: []string{"spec.nodeName"}, WatcherBufferSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	// Wait for the first list.
	if err := c.GetList(context.Background(), prefix, storage.ListOptions{ResourceVersion: "1"}, &corev1.PodList{}); err != nil {
		b.Fatal(err)
	}
	return store, c, prefix
}

// BenchmarkList reads 10,000 pods from the cache (resourceVersion "0") and from etcd
// (resourceVersion "", a consistent read that decodes every object).
func BenchmarkList(b *testing.B) {
	_, c, prefix := benchFixture(b, 10000, 100)
	for _, rv := range []string{"0", ""} {
		name := "cache"
		if rv == "" {
			name = "etcd"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				list := &corev1.PodList{}
				if err := c.GetList(context.Background(), prefix, storage.ListOptions{ResourceVersion: rv}, list); err != nil || len(list.Items) != 10000 {
					b.Fatalf("list: %v (%d items)", err, len(list.Items))
				}
			}
		})
	}
}

// BenchmarkFanOut updates pods at up to 1,000 updates/s while 1,000 watchers, one per
// node, each select their node's pods; every update must reach exactly its node's
// watcher. It reports updates/s achieved and the p50/p99 delay from the start of the
// update's etcd write to its delivery to the watcher.
func BenchmarkFanOut(b *testing.B) {
	const nodes = 1000
	store, c, prefix := benchFixture(b, nodes, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	sent := map[string]time.Time{} // generation label → when its write started
	var delays []time.Duration
	var wg sync.WaitGroup
	received := make(chan struct{}, 1<<16)
	for n := 0; n < nodes; n++ {
		pred := storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", fmt.Sprintf("node-%d", n)),
			Label: labels.Everything(), GetAttrs: podAttrs, IndexFields: []string{"spec.nodeName"}}
		w, err := c.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: "0", Predicate: pred})
		if err != nil {
			b.Fatal(err)
		}
		<-w.ResultChan() // the node's one pod, as a synthetic ADDED
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for ev := range w.ResultChan() {
				at := time.Now()
				generation := ev.Object.(*corev1.Pod).Labels["generation"]
				mu.Lock()
				delays = append(delays, at.Sub(sent[generation]))
				mu.Unlock()
				received <- struct{}{}
			}
		}()
	}

	b.ResetTimer()
	start := time.Now()
	ticker := time.NewTicker(time.Millisecond) // at most 1,000 updates/s
	defer ticker.Stop()
	for i := 0; i < b.N; i++ {
		<-ticker.C
		name := fmt.Sprintf("p-%d", i%nodes)
		mu.Lock()
		sent[strconv.Itoa(i)] = time.Now()
		mu.Unlock()
		err := store.GuaranteedUpdate(ctx, prefix+"default/"+name, nil, nil, func(in runtime.Object) (runtime.Object, error) {
			pod := in.(*corev1.Pod)
			pod.Labels = map[string]string{"generation": strconv.Itoa(i)}
			return pod, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		select {
		case <-received:
		case <-time.After(10 * time.Second):
			b.Fatalf("only %d of %d updates delivered", i, b.N)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()

	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	if len(delays) > 0 {
		b.ReportMetric(float64(delays[len(delays)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "updates/s")
}
