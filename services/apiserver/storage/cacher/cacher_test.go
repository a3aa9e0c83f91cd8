package cacher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// etcdClient is one real embedded etcd shared by the package's tests; each test uses
// its own key prefix.
var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cacher-etcd")
	if err != nil {
		panic(err)
	}
	e, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: dir, ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	if etcdClient, err = e.Client(); err != nil {
		panic(err)
	}
	code := m.Run()
	etcdClient.Close()
	e.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod := obj.(*corev1.Pod)
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "spec.nodeName": pod.Spec.NodeName,
	}, nil
}

// fixture is a cacher over a real etcd3 store under a prefix of its own.
type fixture struct {
	t      *testing.T
	prefix string
	etcd   *etcd3.Store
	cache  *cacher.Cacher
}

func newFixture(t *testing.T, tune func(*cacher.Config)) *fixture {
	t.Helper()
	prefix := fmt.Sprintf("/%s/pods/", t.Name())
	store := etcd3.New(etcdClient, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
	cfg := cacher.Config{
		Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: prefix,
		NewFunc:     func() runtime.Object { return &corev1.Pod{} },
		NewListFunc: func() runtime.Object { return &corev1.PodList{} },
		GetAttrs:    podAttrs, IndexFields: []string{"spec.nodeName"},
	}
	if tune != nil {
		tune(&cfg)
	}
	c, err := cacher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return &fixture{t: t, prefix: prefix, etcd: store, cache: c}
}

func (f *fixture) key(name string) string { return f.prefix + "default/" + name }

func (f *fixture) create(name, node string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
	out := &corev1.Pod{}
	if err := f.cache.Create(context.Background(), f.key(name), pod, out); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) setNode(name, node string) *corev1.Pod {
	f.t.Helper()
	out := &corev1.Pod{}
	err := f.cache.GuaranteedUpdate(context.Background(), f.key(name), out, nil, func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		pod.Spec.NodeName = node
		return pod, nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) delete(name string) {
	f.t.Helper()
	if err := f.cache.Delete(context.Background(), f.key(name), &corev1.Pod{}, nil); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) watch(opts storage.ListOptions) watch.Interface {
	f.t.Helper()
	w, err := f.cache.Watch(context.Background(), f.prefix, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(w.Stop)
	return w
}

// next returns the next non-bookmark event, failing after 10 s.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type != watch.Bookmark {
				return ev
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
	}
}

func describe(ev watch.Event) string {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return string(ev.Type) + " ?"
	}
	return string(ev.Type) + " " + m.GetName()
}

func rvOf(obj runtime.Object) string {
	m, _ := meta.Accessor(obj)
	return m.GetResourceVersion()
}

func TestListFromCacheMatchesEtcd(t *testing.T) {
	f := newFixture(t, nil)
	last := f.create("a", "n1")
	f.create("b", "n2")
	last = f.create("c", "n1")
	list := &corev1.PodList{}
	if err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: rvOf(last)}, list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[a b c]" || list.ResourceVersion == "" {
		t.Errorf("list at %s: %v rv %q", rvOf(last), names, list.ResourceVersion)
	}
	indexed := &corev1.PodList{}
	pred := storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", "n1"), Label: labels.Everything(), GetAttrs: podAttrs}
	if err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: "0", Predicate: pred}, indexed); err != nil {
		t.Fatal(err)
	}
	if len(indexed.Items) != 2 || indexed.Items[0].Name != "a" || indexed.Items[1].Name != "c" {
		t.Errorf("list of node n1: %+v", indexed.Items)
	}
}

func TestWatchFromResourceVersionReplaysLaterEventsInOrder(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	f.create("b", "")
	f.setNode("a", "n1")
	f.delete("b")
	// Make sure the cache has seen them before watching.
	if err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: "0"}, &corev1.PodList{}); err != nil {
		t.Fatal(err)
	}
	w := f.watch(storage.ListOptions{ResourceVersion: rvOf(a)})
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, describe(next(t, w)))
	}
	if fmt.Sprint(got) != "[ADDED b MODIFIED a DELETED b]" {
		t.Errorf("events after %s: %v", rvOf(a), got)
	}
}

func TestWatchListSendsInitialEventsThenEndBookmark(t *testing.T) {
	f := newFixture(t, nil)
	f.create("a", "")
	f.create("b", "")
	w := f.watch(storage.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true})
	var got []string
	for len(got) < 3 {
		ev := <-w.ResultChan()
		if ev.Type == watch.Bookmark {
			m, _ := meta.Accessor(ev.Object)
			if m.GetAnnotations()["k8s.io/initial-events-end"] != "true" {
				continue
			}
			got = append(got, "BOOKMARK end")
			continue
		}
		got = append(got, describe(ev))
	}
	if fmt.Sprint(got) != "[ADDED a ADDED b BOOKMARK end]" {
		t.Errorf("WatchList: %v", got)
	}
	f.create("c", "")
	if ev := describe(next(t, w)); ev != "ADDED c" {
		t.Errorf("then %s, want ADDED c", ev)
	}
}

func TestBookmarksOnlyWhenAllowed(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.BookmarkInterval = 50 * time.Millisecond })
	f.create("a", "")
	with := f.watch(storage.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true})
	without := f.watch(storage.ListOptions{ResourceVersion: "0"})
	deadline := time.After(10 * time.Second)
	for bookmark := false; !bookmark; {
		select {
		case ev := <-with.ResultChan():
			bookmark = ev.Type == watch.Bookmark && rvOf(ev.Object) != ""
		case <-deadline:
			t.Fatal("no bookmark for a watcher that allows them")
		}
	}
	if ev := <-without.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %s", ev.Type)
	}
	select {
	case ev := <-without.ResultChan():
		t.Errorf("a watcher that did not allow bookmarks got %s", ev.Type)
	case <-time.After(300 * time.Millisecond): // six bookmark intervals
	}
}

func TestNodeWatchersSeeOnlyTheirPodsWithTransitions(t *testing.T) {
	f := newFixture(t, nil)
	pred := func(node string) storage.SelectionPredicate {
		return storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", node), Label: labels.Everything(), GetAttrs: podAttrs, IndexFields: []string{"spec.nodeName"}}
	}
	n1 := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: pred("n1")})
	n2 := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: pred("n2")})
	f.create("other", "n3")
	f.create("p", "")
	f.setNode("p", "n1") // bound to n1
	f.setNode("p", "n2") // moved: gone from n1, new on n2
	f.delete("p")
	if got := []string{describe(next(t, n1)), describe(next(t, n1))}; fmt.Sprint(got) != "[ADDED p DELETED p]" {
		t.Errorf("n1 watcher: %v", got)
	}
	if got := []string{describe(next(t, n2)), describe(next(t, n2))}; fmt.Sprint(got) != "[ADDED p DELETED p]" {
		t.Errorf("n2 watcher: %v", got)
	}
}

func TestSlowWatcherIsClosedWithoutBlockingOthers(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.WatcherBufferSize = 5 })
	slow := f.watch(storage.ListOptions{ResourceVersion: "0"})
	fast := f.watch(storage.ListOptions{ResourceVersion: "0"})
	for i := 0; i < 30; i++ {
		f.create(fmt.Sprintf("p%d", i), "")
		if ev := next(t, fast); describe(ev) != fmt.Sprintf("ADDED p%d", i) {
			t.Fatalf("fast watcher got %s", describe(ev))
		}
	}
	closed := false
	for deadline := time.After(10 * time.Second); !closed; {
		select {
		case _, ok := <-slow.ResultChan():
			closed = !ok
		case <-deadline:
			t.Fatal("the slow watcher was never closed")
		}
	}
}

func TestWatchFromBeforeTheCacheIsBackfilledFromEtcd(t *testing.T) {
	// Writes happen before the cache exists, as across an apiserver restart.
	prefix := fmt.Sprintf("/%s/pods/", t.Name())
	store := etcd3.New(etcdClient, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
	first := &corev1.Pod{}
	if err := store.Create(context.Background(), prefix+"default/a", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}, first); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		if err := store.Create(context.Background(), prefix+"default/"+name, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}, &corev1.Pod{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Delete(context.Background(), prefix+"default/b", &corev1.Pod{}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := cacher.New(cacher.Config{Storage: store, RequestProgress: store.RequestProgress, ResourcePrefix: prefix,
		NewFunc: func() runtime.Object { return &corev1.Pod{} }, NewListFunc: func() runtime.Object { return &corev1.PodList{} }, GetAttrs: podAttrs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	w, err := c.Watch(context.Background(), prefix, storage.ListOptions{ResourceVersion: rvOf(first)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, describe(next(t, w)))
	}
	if fmt.Sprint(got) != "[ADDED b ADDED c DELETED b]" {
		t.Errorf("resumed watch: %v", got)
	}
}

func TestWatchFromACompactedRevisionIsExpired(t *testing.T) {
	f := newFixture(t, nil)
	old := f.create("a", "")
	for i := 0; i < 3; i++ {
		f.setNode("a", strconv.Itoa(i))
	}
	latest := f.create("b", "")
	rev, _ := strconv.ParseInt(rvOf(latest), 10, 64)
	if _, err := etcdClient.Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	// A fresh cache starts after the compaction, so the old revision is behind its ring
	// and behind etcd's history.
	store := etcd3.New(etcdClient, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
	c, err := cacher.New(cacher.Config{Storage: store, ResourcePrefix: f.prefix,
		NewFunc: func() runtime.Object { return &corev1.Pod{} }, NewListFunc: func() runtime.Object { return &corev1.PodList{} }, GetAttrs: podAttrs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	w, err := c.Watch(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: rvOf(old)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	status, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || status.Code != 410 {
		t.Fatalf("got %s %+v, want an ERROR event with 410", ev.Type, ev.Object)
	}
	if _, open := <-w.ResultChan(); open {
		t.Error("the watch stays open after 410")
	}
}

func TestListAtAFutureResourceVersionWaitsThenFails(t *testing.T) {
	f := newFixture(t, nil)
	p := f.create("a", "")
	rv, _ := strconv.ParseUint(rvOf(p), 10, 64)
	err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: strconv.FormatUint(rv+1000, 10)}, &corev1.PodList{})
	if err == nil || !errorsIs(err, storage.ErrResourceVersionTooLarge) {
		t.Errorf("list at a revision etcd has not reached: %v", err)
	}
}

func TestStopClosesWatchers(t *testing.T) {
	f := newFixture(t, nil)
	w := f.watch(storage.ListOptions{ResourceVersion: "0"})
	f.cache.Stop()
	for range w.ResultChan() {
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
