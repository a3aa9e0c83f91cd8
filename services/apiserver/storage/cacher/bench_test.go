package cacher_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
)

// seedPods writes pods p-0 … p-(n-1) of namespace default under prefix, pod i on node
// "node-(i % nodes)", in transactions of 100 puts.
func seedPods(b *testing.B, prefix string, n, nodes int) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 100 {
		var ops []clientv3.Op
		for i := start; i < min(start+100, n); i++ {
			pod := newPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("node-%d", i%nodes))
			data, err := runtime.Encode(scheme.StorageCodec, pod)
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(prefix+"default/"+pod.Name, string(data)))
		}
		if _, err := etcdClient.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCache starts a cache over prefix and waits until it has everything etcd has.
func benchCache(b *testing.B, prefix string, tune func(*cacher.Config)) *cacher.Cacher {
	b.Helper()
	cfg := podConfig(newPodStore(etcdClient), prefix)
	if tune != nil {
		tune(&cfg)
	}
	c, err := cacher.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.Ready(), nil
	}); err != nil {
		b.Fatal("the cache never became ready")
	}
	rev, err := newPodStore(etcdClient).CurrentRevision(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if err := c.GetList(context.Background(), prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(rev, 10)}, &corev1.PodList{}); err != nil {
		b.Fatal(err)
	}
	return c
}

const listPods = 10000

var (
	listSeedOnce   sync.Once
	listSeedPrefix = fmt.Sprintf("/bench-list-%d/pods/", time.Now().UnixNano())
)

// listFixture is 10,000 pods over 100 nodes, written once per test binary.
func listFixture(b *testing.B) string {
	listSeedOnce.Do(func() { seedPods(b, listSeedPrefix, listPods, 100) })
	return listSeedPrefix
}

func benchmarkList(b *testing.B, s storage.Interface, prefix string, opts storage.ListOptions, want int) {
	b.ReportAllocs()
	for b.Loop() {
		list := &corev1.PodList{}
		if err := s.GetList(context.Background(), prefix, opts, list); err != nil || len(list.Items) != want {
			b.Fatalf("list: %v (%d items, want %d)", err, len(list.Items), want)
		}
	}
}

// BenchmarkListFromCache lists 10,000 pods at resourceVersion "0" from the cache.
func BenchmarkListFromCache(b *testing.B) {
	prefix := listFixture(b)
	benchmarkList(b, benchCache(b, prefix, nil), prefix, storage.ListOptions{ResourceVersion: "0"}, listPods)
}

// BenchmarkListFromEtcd lists the same 10,000 pods from etcd (resourceVersion "", a
// consistent read that decodes every object).
func BenchmarkListFromEtcd(b *testing.B) {
	prefix := listFixture(b)
	benchmarkList(b, newPodStore(etcdClient), prefix, storage.ListOptions{}, listPods)
}

// BenchmarkListOneNodeFromCache lists one node's 100 of the 10,000 pods from the cache
// by the spec.nodeName index, as a kubelet's list does.
func BenchmarkListOneNodeFromCache(b *testing.B) {
	prefix := listFixture(b)
	opts := storage.ListOptions{ResourceVersion: "0", Predicate: nodePredicate("node-7")}
	benchmarkList(b, benchCache(b, prefix, nil), prefix, opts, listPods/100)
}

// BenchmarkFanOut: 1,000 watchers, one per node, each selecting its node's pods with
// spec.nodeName=node-N (as kubelets do); 8 writers update 2,000 pods spread over the
// nodes, each update reaching exactly one watcher. ns/op is the wall time per update
// through etcd and the cache; p50/p99 are the delay from the start of an update's etcd
// write to its delivery on the node's watch. "indexed" registers the watchers under
// their node (Predicate.IndexFields); "unindexed" offers every event to every watcher,
// which then tests its selector.
func BenchmarkFanOut(b *testing.B) {
	for _, indexed := range []bool{true, false} {
		name := "indexed"
		if !indexed {
			name = "unindexed"
		}
		b.Run(name, func(b *testing.B) { benchmarkFanOut(b, indexed) })
	}
}

func benchmarkFanOut(b *testing.B, indexed bool) {
	const nodes, pods, writers = 1000, 2000, 8
	prefix := fmt.Sprintf("/bench-fanout-%d/pods/", time.Now().UnixNano())
	seedPods(b, prefix, pods, nodes)
	c := benchCache(b, prefix, nil)
	store := newPodStore(etcdClient)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		sent      sync.Map // update number → time its write started
		delivered atomic.Int64
		closed    atomic.Int64
		mu        sync.Mutex
		delays    []time.Duration
		consumers sync.WaitGroup
	)
	for n := range nodes {
		pred := nodePredicate(fmt.Sprintf("node-%d", n))
		if !indexed {
			pred.IndexFields = nil
		}
		w, err := c.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: "0", Predicate: pred})
		if err != nil {
			b.Fatal(err)
		}
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			defer closed.Add(1)
			for range pods / nodes { // the node's pods, as synthetic ADDED events
				<-w.ResultChan()
			}
			for ev := range w.ResultChan() {
				at := time.Now()
				seq := ev.Object.(*corev1.Pod).Labels["seq"]
				start, _ := sent.Load(seq)
				mu.Lock()
				delays = append(delays, at.Sub(start.(time.Time)))
				mu.Unlock()
				delivered.Add(1)
			}
		}()
	}

	var next atomic.Int64
	var writes sync.WaitGroup
	b.ResetTimer()
	begin := time.Now()
	for range writers {
		writes.Add(1)
		go func() {
			defer writes.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				seq := strconv.FormatInt(i, 10)
				sent.Store(seq, time.Now())
				err := store.GuaranteedUpdate(ctx, fmt.Sprintf("%sdefault/p-%d", prefix, i%pods), nil, nil, func(in runtime.Object) (runtime.Object, error) {
					pod := in.(*corev1.Pod)
					pod.Labels = map[string]string{"app": "web", "seq": seq}
					return pod, nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	writes.Wait()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return delivered.Load() >= int64(b.N) || closed.Load() > 0, nil
	}); err != nil || closed.Load() > 0 {
		b.Fatalf("%d of %d updates delivered, %d watchers closed", delivered.Load(), b.N, closed.Load())
	}
	elapsed := time.Since(begin)
	b.StopTimer()
	cancel()
	consumers.Wait()

	slices.Sort(delays)
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds()), "p99-µs")
}
