package cacher_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
)

// expectNothingBefore writes a sentinel pod on node and requires it to be w's next
// event: proof that nothing else was pending for w.
func (f *fixture) expectNothingBefore(t *testing.T, w watch.Interface, node string) {
	t.Helper()
	sentinel := f.create("zz-sentinel-"+node, node)
	if got := describe(next(t, w)); got != ev(watch.Added, sentinel) {
		t.Fatalf("got %s, want nothing before %s", got, ev(watch.Added, sentinel))
	}
}

func TestWatchFromAResourceVersionReplaysExactlyTheLaterEventsInOrder(t *testing.T) {
	f := newFixture(t, nil)
	f.create("before", "")
	a := f.create("a", "")
	b := f.create("b", "")
	moved := f.setNode("a", "n1")
	deleted := f.delete("b")
	f.catchUp(deleted.ResourceVersion) // all in the ring

	w := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})
	want := []string{ev(watch.Added, b), ev(watch.Modified, moved), ev(watch.Deleted, deleted)}
	if got := nextN(t, w, 3); !slices.Equal(got, want) {
		t.Errorf("events after %s:\n got %v\nwant %v", a.ResourceVersion, got, want)
	}
	f.expectNothingBefore(t, w, "")
}

func TestWatchFromZeroSendsTheCurrentStateThenChanges(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		t.Run(fmt.Sprintf("resourceVersion %q", rv), func(t *testing.T) {
			f := newFixture(t, nil)
			a := f.create("a", "")
			b := f.create("b", "")
			f.catchUp(b.ResourceVersion)
			w := f.watch(storage.ListOptions{ResourceVersion: rv})
			if got, want := nextN(t, w, 2), []string{ev(watch.Added, a), ev(watch.Added, b)}; !slices.Equal(got, want) {
				t.Errorf("initial events %v, want %v", got, want)
			}
			c := f.create("c", "")
			if got := describe(next(t, w)); got != ev(watch.Added, c) {
				t.Errorf("then %s, want %s", got, ev(watch.Added, c))
			}
		})
	}
}

func TestWatchWithoutInitialEventsStartsAtTheCache(t *testing.T) {
	f := newFixture(t, nil)
	old := f.create("old", "")
	f.catchUp(old.ResourceVersion)
	w := f.watch(storage.ListOptions{ResourceVersion: "0", SendInitialEvents: ptr.To(false)})
	f.expectNothingBefore(t, w, "")
}

func TestWatchListSendsInitialEventsThenTheEndBookmarkThenChanges(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	// No wait for the cache: a WatchList at resourceVersion "" must include b.
	b := f.create("b", "")

	w := f.watch(storage.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true})
	if got, want := []string{describe(nextEvent(t, w)), describe(nextEvent(t, w))}, []string{ev(watch.Added, a), ev(watch.Added, b)}; !slices.Equal(got, want) {
		t.Errorf("initial events %v, want %v", got, want)
	}
	end := nextEvent(t, w)
	pod, _ := end.Object.(*corev1.Pod)
	if end.Type != watch.Bookmark || pod == nil || pod.Annotations["k8s.io/initial-events-end"] != "true" || pod.Name != "" {
		t.Fatalf("after the initial events: %s %#v, want the initial-events-end bookmark", end.Type, end.Object)
	}
	if mustRV(t, pod.ResourceVersion) < mustRV(t, b.ResourceVersion) {
		t.Errorf("end bookmark at %s, want at least %s", pod.ResourceVersion, b.ResourceVersion)
	}
	if pod.Kind != "Pod" {
		t.Errorf("bookmark kind %q, want Pod", pod.Kind)
	}
	c := f.create("c", "")
	if got := describe(next(t, w)); got != ev(watch.Added, c) {
		t.Errorf("then %s, want %s", got, ev(watch.Added, c))
	}
}

func TestWatchListWithoutBookmarksSendsNoEndBookmark(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	w := f.watch(storage.ListOptions{SendInitialEvents: ptr.To(true)})
	if got := describe(nextEvent(t, w)); got != ev(watch.Added, a) {
		t.Fatalf("initial event %s, want %s", got, ev(watch.Added, a))
	}
	b := f.create("b", "")
	if got := describe(nextEvent(t, w)); got != ev(watch.Added, b) {
		t.Errorf("then %s, want %s and no bookmark", got, ev(watch.Added, b))
	}
}

func TestWatchFromBeforeTheRingThatEtcdCompactedIsExpired(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.EventRingSize = 3 })
	old := f.create("a", "")
	var last *corev1.Pod
	for i := range 5 {
		last = f.setNode("a", strconv.Itoa(i))
	}
	f.catchUp(last.ResourceVersion)
	if _, err := etcdClient.Compact(context.Background(), int64(mustRV(t, last.ResourceVersion))); err != nil {
		t.Fatal(err)
	}

	w := f.watch(storage.ListOptions{ResourceVersion: old.ResourceVersion})
	e := nextEvent(t, w)
	status, ok := e.Object.(*metav1.Status)
	if e.Type != watch.Error || !ok || status.Code != http.StatusGone || status.Reason != metav1.StatusReasonExpired {
		t.Fatalf("got %s %#v, want an ERROR event with 410 Expired", e.Type, e.Object)
	}
	if want := "too old resource version: " + old.ResourceVersion; !strings.Contains(status.Message, want) {
		t.Errorf("message %q, want it to say %q", status.Message, want)
	}
	expectClosed(t, w)
}

func TestWatchFromBeforeTheRingIsReplayedFromEtcd(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.EventRingSize = 2 })
	a := f.create("a", "")
	b := f.create("b", "")
	moved := f.setNode("a", "n1")
	deleted := f.delete("b")
	c := f.create("c", "")
	f.catchUp(c.ResourceVersion)

	// The ring holds only the last two events; etcd still has the rest.
	w := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})
	want := []string{ev(watch.Added, b), ev(watch.Modified, moved), ev(watch.Deleted, deleted), ev(watch.Added, c)}
	if got := nextN(t, w, 4); !slices.Equal(got, want) {
		t.Errorf("events after %s:\n got %v\nwant %v", a.ResourceVersion, got, want)
	}
	f.expectNothingBefore(t, w, "")
}

func TestWatchFromBeforeTheCacheStartedIsReplayedFromEtcd(t *testing.T) {
	f := &fixture{t: t, prefix: testPrefix(t), etcd: newPodStore(etcdClient)}
	// Writes happen before the cache exists, as across an apiserver restart.
	a := f.create("a", "")
	b := f.create("b", "")
	deleted := f.delete("b")
	f.cache = f.start(f.etcd, nil)

	w := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})
	if got, want := nextN(t, w, 2), []string{ev(watch.Added, b), ev(watch.Deleted, deleted)}; !slices.Equal(got, want) {
		t.Errorf("resumed watch: %v, want %v", got, want)
	}
}

func TestWatchAtAFutureResourceVersionFailsTooLarge(t *testing.T) {
	f := newFixture(t, nil)
	current, _ := f.etcd.CurrentRevision(context.Background())
	_, err := f.cache.Watch(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(current+1000, 10)})
	if !errors.Is(err, storage.ErrResourceVersionTooLarge) {
		t.Errorf("watch at a future revision: %v, want ErrResourceVersionTooLarge", err)
	}
}

func TestBookmarksOnlyForWatchersThatAllowThem(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.BookmarkInterval = 20 * time.Millisecond })
	a := f.create("a", "")
	f.catchUp(a.ResourceVersion)
	with := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion, AllowWatchBookmarks: true})
	without := f.watch(storage.ListOptions{ResourceVersion: a.ResourceVersion})

	// The resource stays idle while another one is written: the bookmarks still reach
	// etcd's revision, through progress notifications.
	other := &corev1.Pod{}
	if err := f.etcd.Create(context.Background(), testPrefix(t)+"other", newPod("x", ""), other); err != nil {
		t.Fatal(err)
	}
	for bookmarks := 0; ; {
		e := nextEvent(t, with)
		pod, _ := e.Object.(*corev1.Pod)
		if e.Type != watch.Bookmark || pod == nil || pod.Name != "" {
			t.Fatalf("got %s, want only bookmarks", describe(e))
		}
		if bookmarks++; bookmarks >= 2 && mustRV(t, pod.ResourceVersion) >= mustRV(t, other.ResourceVersion) {
			break
		}
	}
	// Dispatch is in order: a bookmark for the other watcher would come before this.
	f.expectNothingBefore(t, without, "")
}

func TestNodeWatchersSeeOnlyTheirPodsAndTheirBindingsAsAddedAndDeleted(t *testing.T) {
	f := newFixture(t, nil)
	n1 := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: nodePredicate("n1")})
	n2 := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: nodePredicate("n2")})
	// The same selector without the index hint is served by testing every event.
	n2Unindexed := nodePredicate("n2")
	n2Unindexed.IndexFields = nil
	n2Scan := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: n2Unindexed})

	f.create("elsewhere", "n3")
	f.create("p", "")
	bound := f.setNode("p", "n1")
	moved := f.setNode("p", "n2")
	deleted := f.delete("p")

	leftN1 := moved.DeepCopy()
	leftN1.Spec.NodeName = "n1" // what n1 last saw, at the move's resourceVersion
	if got, want := nextN(t, n1, 2), []string{ev(watch.Added, bound), ev(watch.Deleted, leftN1)}; !slices.Equal(got, want) {
		t.Errorf("n1's watcher: %v, want %v", got, want)
	}
	for name, w := range map[string]watch.Interface{"n2's watcher": n2, "n2's unindexed watcher": n2Scan} {
		if got, want := nextN(t, w, 2), []string{ev(watch.Added, moved), ev(watch.Deleted, deleted)}; !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	f.expectNothingBefore(t, n1, "n1")
	f.expectNothingBefore(t, n2, "n2")
}

func TestNodeWatcherDeletedOnUnbindCarriesTheOldState(t *testing.T) {
	f := newFixture(t, nil)
	f.create("p", "n1")
	w := f.watch(storage.ListOptions{ResourceVersion: "0", Predicate: nodePredicate("n1")})
	next(t, w) // the initial ADDED
	unbound := f.setNode("p", "")
	e := next(t, w)
	pod, _ := e.Object.(*corev1.Pod)
	if e.Type != watch.Deleted || pod == nil || pod.Spec.NodeName != "n1" || pod.ResourceVersion != unbound.ResourceVersion {
		t.Errorf("got %s on %q, want DELETED p on n1 at %s", describe(e), pod.Spec.NodeName, unbound.ResourceVersion)
	}
}

func TestSlowWatcherIsClosedWithoutHoldingUpOthers(t *testing.T) {
	f := newFixture(t, func(c *cacher.Config) { c.WatcherBufferSize = 5 })
	f.catchUp("1")
	slow := f.watch(storage.ListOptions{ResourceVersion: "0"}) // never read until the end
	fast := f.watch(storage.ListOptions{ResourceVersion: "0"})
	for i := range 50 {
		p := f.create(fmt.Sprintf("p%02d", i), "")
		if got := describe(next(t, fast)); got != ev(watch.Added, p) {
			t.Fatalf("fast watcher got %s, want %s", got, ev(watch.Added, p))
		}
	}
	// The slow watcher got what fit in its queues, then was closed.
	got := 0
	for range slow.ResultChan() {
		got++
	}
	if got >= 50 {
		t.Errorf("the slow watcher got all %d events; want it closed before", got)
	}
}

func TestWatchOfOneObjectSeesOnlyThatObject(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	f.create("b", "")
	w := startWatch(t, f.cache, f.key("a"), storage.ListOptions{ResourceVersion: "0"})
	if got := describe(next(t, w)); got != ev(watch.Added, a) {
		t.Fatalf("initial event %s, want %s", got, ev(watch.Added, a))
	}
	f.setNode("b", "n1")
	deleted := f.delete("a")
	if got := describe(next(t, w)); got != ev(watch.Deleted, deleted) {
		t.Errorf("then %s, want %s", got, ev(watch.Deleted, deleted))
	}
}

func TestWatchEndsWithItsContext(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.cache.Watch(ctx, f.prefix, storage.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	expectClosed(t, w)
	w.Stop() // still safe
}

// sharedObject reports whether two events carry the very same object.
func sharedObject(a, b runtime.Object) bool { return a == b }

func TestWatchersShareEventObjects(t *testing.T) {
	f := newFixture(t, nil)
	w1 := f.watch(storage.ListOptions{ResourceVersion: "0"})
	w2 := f.watch(storage.ListOptions{ResourceVersion: "0"})
	f.create("a", "")
	e1, e2 := next(t, w1), next(t, w2)
	if !sharedObject(e1.Object, e2.Object) {
		t.Error("each watcher got its own copy; the cache hands out one shared object")
	}
	if e1.Object.GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Errorf("shared object's kind %q, want Pod stamped before sharing", e1.Object.GetObjectKind().GroupVersionKind().Kind)
	}
}
