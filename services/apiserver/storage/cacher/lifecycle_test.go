package cacher_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/internal/embedetcd"
)

// newInterruptibleFixture is a fixture whose cache reaches etcd through interruptible.
func newInterruptibleFixture(t *testing.T, holdFirstList bool) (*fixture, *interruptible) {
	t.Helper()
	f := &fixture{t: t, prefix: testPrefix(t), etcd: newPodStore(etcdClient)}
	store := &interruptible{Store: f.etcd, prefix: f.prefix}
	if holdFirstList {
		store.holdBack()
	}
	f.cache = f.start(store, nil)
	return f, store
}

// converged reports whether the cache's resourceVersion="0" list equals etcd's list.
func (f *fixture) converged() bool {
	list := &corev1.PodList{}
	if err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: "0"}, list); err != nil {
		return false
	}
	return slices.Equal(summary(list), summary(f.etcdList(storage.SelectionPredicate{})))
}

func TestBeforeTheFirstListReadsGoToEtcdAndWatchesWait(t *testing.T) {
	f, store := newInterruptibleFixture(t, true)
	a := f.create("a", "")
	if f.cache.Ready() {
		t.Fatal("Ready before the first list")
	}
	for _, rv := range []string{"0", a.ResourceVersion} {
		if got := summary(f.list(storage.ListOptions{ResourceVersion: rv})); len(got) != 1 {
			t.Errorf("list at %q before the cache is ready: %v, want a from etcd", rv, got)
		}
		out := &corev1.Pod{}
		if err := f.cache.Get(context.Background(), f.key("a"), storage.GetOptions{ResourceVersion: rv}, out); err != nil || out.Name != "a" {
			t.Errorf("get at %q before the cache is ready: %v %q, want a from etcd", rv, err, out.Name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.cache.Watch(ctx, f.prefix, storage.ListOptions{ResourceVersion: "0"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("watch before the cache is ready: %v, want it to wait until its context ends", err)
	}

	store.release()
	eventually(t, "the cache is ready", f.cache.Ready)
	w := f.watch(storage.ListOptions{ResourceVersion: "0"})
	if got := describe(next(t, w)); got != ev(watch.Added, a) {
		t.Errorf("watch once ready: %s, want %s", got, ev(watch.Added, a))
	}
}

func TestWatchersSurviveABrokenEtcdWatch(t *testing.T) {
	f, store := newInterruptibleFixture(t, false)
	a := f.create("a", "")
	w := f.watch(storage.ListOptions{ResourceVersion: "0"})
	if got := describe(next(t, w)); got != ev(watch.Added, a) {
		t.Fatalf("initial event %s", got)
	}

	store.holdBack()
	store.breakWatch(t)
	b := f.create("b", "") // while the cache is not watching
	store.release()

	if got := describe(next(t, w)); got != ev(watch.Added, b) {
		t.Errorf("after the cache re-watched: %s, want %s", got, ev(watch.Added, b))
	}
	if n := store.listCount(); n != 1 {
		t.Errorf("the cache listed %d times, want once: a broken watch resumes from the cache's revision", n)
	}
	eventually(t, "the cache converges to etcd", f.converged)
}

func TestCacheRelistsWhenEtcdCompactedPastItsRevision(t *testing.T) {
	f, store := newInterruptibleFixture(t, false)
	f.create("a", "")
	w := f.watch(storage.ListOptions{ResourceVersion: "0"})
	next(t, w)

	store.holdBack()
	store.breakWatch(t)
	f.create("b", "")
	f.delete("a")
	current, _ := f.etcd.CurrentRevision(context.Background())
	if _, err := etcdClient.Compact(context.Background(), current); err != nil {
		t.Fatal(err)
	}
	store.release()

	eventually(t, "the cache relists", func() bool { return store.listCount() == 2 })
	expectClosed(t, w) // its client re-watches from its last resourceVersion
	eventually(t, "the cache converges to etcd", f.converged)
	if !f.cache.Ready() {
		t.Error("not Ready after the relist")
	}
}

func TestCacheRecoversWhenEtcdRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts an etcd of its own (about 10 s)")
	}
	dir := t.TempDir()
	peer := freeURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, ClientURL: "http://127.0.0.1:0", PeerURL: peer})
	if err != nil {
		t.Fatal(err)
	}
	client, err := first.Client()
	if err != nil {
		first.Close()
		t.Fatal(err)
	}
	defer client.Close()
	f := &fixture{t: t, prefix: testPrefix(t), etcd: newPodStore(client)}
	f.cache = f.start(f.etcd, nil)
	defer f.cache.Stop() // before the client closes
	a := f.create("a", "")
	f.catchUp(a.ResourceVersion)
	w := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})

	first.Close()
	// etcd is down: the cache still answers from memory.
	if got := summary(f.list(storage.ListOptions{ResourceVersion: "0"})); len(got) != 1 {
		t.Errorf("list while etcd is down: %v, want a", got)
	}
	second, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, ClientURL: first.Endpoint(), PeerURL: peer})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Without open watches etcd stops at once.
		f.cache.Stop()
		client.Close()
		second.Close()
	}()

	var b *corev1.Pod
	eventually(t, "etcd takes writes again", func() bool {
		out := &corev1.Pod{}
		wctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := f.etcd.Create(wctx, f.key("b"), newPod("b", ""), out); err != nil {
			return false
		}
		b = out
		return true
	})
	eventually(t, "the cache converges to etcd", f.converged)
	// The watcher sees b, or was closed by a relist and sees b on re-watching.
	if e, ok := <-w.ResultChan(); ok {
		for e.Type == watch.Bookmark {
			e = nextEvent(t, w)
		}
		if describe(e) != ev(watch.Added, b) {
			t.Errorf("watcher after the restart: %s, want %s", describe(e), ev(watch.Added, b))
		}
	} else {
		w = f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})
		if got := describe(next(t, w)); got != ev(watch.Added, b) {
			t.Errorf("re-watch after the restart: %s, want %s", got, ev(watch.Added, b))
		}
	}
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

func TestStopClosesEveryWatcherAndLeavesNoGoroutines(t *testing.T) {
	baseline := runtime.NumGoroutine()
	f := newFixture(t, nil)
	f.create("a", "n1")
	watchers := []watch.Interface{
		f.watch(storage.ListOptions{ResourceVersion: "0"}),
		f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: nodePredicate("n1")}),
		f.watch(storage.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true}),
	}
	for i := range 20 { // more than the unread watchers' queues need
		f.create("p"+string(rune('a'+i)), "n1")
	}
	f.catchUp("1")

	f.cache.Stop()
	for _, w := range watchers {
		expectClosed(t, w)
	}
	if _, err := f.cache.Watch(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: "0"}); err == nil {
		t.Error("Watch after Stop succeeded")
	}
	if got := summary(f.list(storage.ListOptions{ResourceVersion: "0"})); len(got) != 21 {
		t.Errorf("list after Stop: %d pods, want 21 from etcd", len(got))
	}
	eventually(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}
