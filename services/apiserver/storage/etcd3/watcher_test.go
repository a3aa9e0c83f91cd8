package etcd3_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/etcd3"
)

// eventTimeout bounds how long a test waits for an event that must come; it only turns
// a hang into a failure.
const eventTimeout = 20 * time.Second

// seen is an event reduced to what the specifications compare.
type seen struct {
	Type watch.EventType
	Name string
	RV   string
}

func (s seen) String() string { return fmt.Sprintf("%s %s@%s", s.Type, s.Name, s.RV) }

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("result channel closed, want an event")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatal("no event")
	}
	return watch.Event{}
}

// expectEvents reads len(want) events and compares them with want; an RV of "" in want
// matches any resourceVersion.
func expectEvents(t *testing.T, w watch.Interface, want ...seen) {
	t.Helper()
	for i, wantEv := range want {
		ev := nextEvent(t, w)
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			t.Fatalf("event %d = %s %#v, want %s", i, ev.Type, ev.Object, wantEv)
		}
		got := seen{ev.Type, pod.Name, pod.ResourceVersion}
		if wantEv.RV == "" {
			got.RV = ""
		}
		if got != wantEv {
			t.Fatalf("event %d = %s, want %s", i, got, wantEv)
		}
	}
}

// expectNothingBefore writes a sentinel pod and requires it to be the next event: proof
// that no other event was pending.
func expectNothingBefore(t *testing.T, store *etcd3.Store, prefix string, w watch.Interface) {
	t.Helper()
	createPod(t, store, prefix, newPod(t, "zz-sentinel", "node-1"))
	expectEvents(t, w, seen{Type: watch.Added, Name: "zz-sentinel"})
}

func expectClosed(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("got %s event, want the result channel closed", ev.Type)
		}
	case <-time.After(eventTimeout):
		t.Fatal("result channel not closed")
	}
}

func startWatch(t *testing.T, store *etcd3.Store, key string, opts storage.ListOptions) watch.Interface {
	t.Helper()
	w, err := store.Watch(testContext(t), key, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWatchFromResourceVersionSeesEveryLaterEventInOrder(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "before", ""))
	a := createPod(t, store, prefix, newPod(t, "a", ""))

	updated := &corev1.Pod{}
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", updated, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}
	b := createPod(t, store, prefix, newPod(t, "b", ""))
	deleted := &corev1.Pod{}
	if err := store.Delete(testContext(t), prefix+"a", deleted, nil); err != nil {
		t.Fatal(err)
	}

	w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: a.ResourceVersion})

	expectEvents(t, w,
		seen{watch.Modified, "a", updated.ResourceVersion},
		seen{watch.Added, "b", b.ResourceVersion},
		seen{watch.Deleted, "a", deleted.ResourceVersion},
	)
	expectNothingBefore(t, store, prefix, w)
}

func TestWatchFromZeroSendsCurrentStateThenChanges(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		t.Run(fmt.Sprintf("resourceVersion %q", rv), func(t *testing.T) {
			store, prefix := newTestStore(t)
			a := createPod(t, store, prefix, newPod(t, "a", ""))
			b := createPod(t, store, prefix, newPod(t, "b", ""))

			w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: rv})
			expectEvents(t, w,
				seen{watch.Added, "a", a.ResourceVersion},
				seen{watch.Added, "b", b.ResourceVersion},
			)

			c := createPod(t, store, prefix, newPod(t, "c", ""))
			expectEvents(t, w, seen{watch.Added, "c", c.ResourceVersion})
		})
	}
}

func TestWatchOfOneKeySeesOnlyThatObject(t *testing.T) {
	store, prefix := newTestStore(t)
	a := createPod(t, store, prefix, newPod(t, "a", ""))

	w := startWatch(t, store, prefix+"a", storage.ListOptions{})
	expectEvents(t, w, seen{watch.Added, "a", a.ResourceVersion})

	createPod(t, store, prefix, newPod(t, "ab", ""))
	updated := &corev1.Pod{}
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", updated, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, seen{watch.Modified, "a", updated.ResourceVersion})
}

func TestWatchWithFieldSelectorTurnsMatchChangesIntoAddedAndDeleted(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "elsewhere", "node-2"))
	createPod(t, store, prefix, newPod(t, "leaving", "node-1"))
	createPod(t, store, prefix, newPod(t, "arriving", ""))
	start, _ := store.CurrentRevision(testContext(t))
	onNode1 := storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", "node-1"), GetAttrs: podAttrs}

	w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(start, 10), Predicate: onNode1})

	update := func(name string, fn func(*corev1.Pod)) *corev1.Pod {
		out := &corev1.Pod{}
		err := store.GuaranteedUpdate(testContext(t), prefix+name, out, nil, func(in k8sruntime.Object) (k8sruntime.Object, error) {
			fn(in.(*corev1.Pod))
			return in, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	update("elsewhere", func(p *corev1.Pod) { p.Labels["touched"] = "yes" })           // no/no: skipped
	arrived := update("arriving", func(p *corev1.Pod) { p.Spec.NodeName = "node-1" })  // no/yes
	touched := update("arriving", func(p *corev1.Pod) { p.Labels["touched"] = "yes" }) // yes/yes
	left := update("leaving", func(p *corev1.Pod) { p.Spec.NodeName = "node-2" })      // yes/no

	expectEvents(t, w,
		seen{watch.Added, "arriving", arrived.ResourceVersion},
		seen{watch.Modified, "arriving", touched.ResourceVersion},
		seen{watch.Deleted, "leaving", left.ResourceVersion},
	)
	expectNothingBefore(t, store, prefix, w)
}

func TestWatchFieldSelectorDeletedEventCarriesLastMatchingState(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "leaving", "node-1"))
	onNode1 := storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", "node-1"), GetAttrs: podAttrs}
	w := startWatch(t, store, prefix, storage.ListOptions{Predicate: onNode1})
	expectEvents(t, w, seen{Type: watch.Added, Name: "leaving"})

	if err := store.GuaranteedUpdate(testContext(t), prefix+"leaving", &corev1.Pod{}, nil, setNode("node-2")); err != nil {
		t.Fatal(err)
	}

	ev := nextEvent(t, w)
	if pod := ev.Object.(*corev1.Pod); ev.Type != watch.Deleted || pod.Spec.NodeName != "node-1" {
		t.Errorf("event = %s of a pod on %q, want DELETED of the pod as it was on node-1", ev.Type, pod.Spec.NodeName)
	}
}

func TestWatchFromCompactedRevisionSendsOneExpiredErrorThenCloses(t *testing.T) {
	store, prefix := newTestStore(t)
	a := createPod(t, store, prefix, newPod(t, "a", ""))
	createPod(t, store, prefix, newPod(t, "b", ""))
	// etcd keeps the revision it compacts at: one more write puts b's revision, the
	// first one a watch from a's would send, behind the compaction.
	createPod(t, store, prefix, newPod(t, "c", ""))
	compacted := compactAll(t)

	w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: a.ResourceVersion})

	ev := nextEvent(t, w)
	status, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok {
		t.Fatalf("event = %s %T, want ERROR *metav1.Status", ev.Type, ev.Object)
	}
	if status.Code != http.StatusGone || status.Reason != metav1.StatusReasonExpired {
		t.Errorf("status = %d %s, want 410 Expired", status.Code, status.Reason)
	}
	if want := fmt.Sprintf("too old resource version: %s (%d)", a.ResourceVersion, compacted); status.Message != want {
		t.Errorf("message = %q, want %q", status.Message, want)
	}
	expectClosed(t, w)
}

func TestWatchEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(w watch.Interface, cancel context.CancelFunc)
	}{
		{"Stop closes the result channel", func(w watch.Interface, _ context.CancelFunc) { w.Stop() }},
		{"context cancel closes the result channel", func(_ watch.Interface, cancel context.CancelFunc) { cancel() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, prefix := newTestStore(t)
			createPod(t, store, prefix, newPod(t, "a", ""))
			baseline := runtime.NumGoroutine()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := store.Watch(ctx, prefix, storage.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			expectEvents(t, w, seen{Type: watch.Added, Name: "a"})
			// Wait for a live event so the etcd watch is established: clientv3 keeps its
			// gRPC stream open when a watch is cancelled before etcd acknowledged it
			// (it is reused by the next watch), which would read as a leak here.
			createPod(t, store, prefix, newPod(t, "b", ""))
			expectEvents(t, w, seen{Type: watch.Added, Name: "b"})
			tc.end(w, cancel)

			// Events may still be buffered; the channel must close after them.
			for range w.ResultChan() {
			}
			_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, eventTimeout, true, func(context.Context) (bool, error) {
				return runtime.NumGoroutine() <= baseline, nil
			})
			if n := runtime.NumGoroutine(); n > baseline {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines after the watch ended, %d before it started\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestWatchStopWithUnreadEventsDoesNotBlock(t *testing.T) {
	store, prefix := newTestStore(t)
	for i := range 5 {
		createPod(t, store, prefix, newPod(t, fmt.Sprintf("p%d", i), ""))
	}
	w, err := store.Watch(testContext(t), prefix, storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(eventTimeout):
		t.Fatal("Stop blocked")
	}
	for range w.ResultChan() {
	}
}

func TestWatchRejectsMalformedResourceVersion(t *testing.T) {
	store, prefix := newTestStore(t)
	if _, err := store.Watch(testContext(t), prefix, storage.ListOptions{ResourceVersion: "x1"}); !errors.Is(err, storage.ErrInvalidResourceVersion) {
		t.Errorf("Watch error = %v, want storage.ErrInvalidResourceVersion", err)
	}
}

func TestWatchListSendsInitialEventsThenEndBookmarkThenChanges(t *testing.T) {
	store, prefix := newTestStore(t)
	a := createPod(t, store, prefix, newPod(t, "a", ""))
	b := createPod(t, store, prefix, newPod(t, "b", ""))
	current, _ := store.CurrentRevision(testContext(t))

	w := startWatch(t, store, prefix, storage.ListOptions{SendInitialEvents: ptr(true), AllowWatchBookmarks: true})
	expectEvents(t, w, seen{watch.Added, "a", a.ResourceVersion}, seen{watch.Added, "b", b.ResourceVersion})
	ev := nextEvent(t, w)
	pod, _ := ev.Object.(*corev1.Pod)
	if ev.Type != watch.Bookmark || pod == nil || pod.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Fatalf("after the initial events: %s %#v, want the initial-events-end bookmark", ev.Type, ev.Object)
	}
	if got, _ := strconv.ParseInt(pod.ResourceVersion, 10, 64); got < current {
		t.Errorf("end bookmark at %s, want at least %d", pod.ResourceVersion, current)
	}
	c := createPod(t, store, prefix, newPod(t, "c", ""))
	expectEvents(t, w, seen{watch.Added, "c", c.ResourceVersion})
}

func TestWatchListAtAFutureRevisionFailsTooLarge(t *testing.T) {
	store, prefix := newTestStore(t)
	current, _ := store.CurrentRevision(testContext(t))
	w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(current+1000, 10),
		SendInitialEvents: ptr(true), AllowWatchBookmarks: true})
	ev := nextEvent(t, w)
	status, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || status.Code != http.StatusGatewayTimeout ||
		len(status.Details.Causes) != 1 || status.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Fatalf("got %s %#v, want a 504 ResourceVersionTooLarge error", ev.Type, ev.Object)
	}
	expectClosed(t, w)
}

func TestWatchWithoutInitialEventsStartsFromNow(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "before", ""))
	w := startWatch(t, store, prefix, storage.ListOptions{ResourceVersion: "0", SendInitialEvents: ptr(false)})
	// The watch may start a moment after Watch returns: write until one change shows.
	for i := 0; ; i++ {
		createPod(t, store, prefix, newPod(t, "after-"+strconv.Itoa(i), ""))
		select {
		case ev := <-w.ResultChan():
			pod, _ := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Added || pod == nil || pod.Name == "before" {
				t.Fatalf("first event %s %#v, want a change made after the watch started", ev.Type, ev.Object)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if i == 100 {
			t.Fatal("no change arrived")
		}
	}
}

func TestWatchWithBookmarksTurnsProgressNotificationsIntoBookmarks(t *testing.T) {
	store, prefix := newTestStore(t)
	a := createPod(t, store, prefix, newPod(t, "a", ""))
	ctx := storage.WithWatchStream(testContext(t), t.Name())
	w, err := store.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: a.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Another resource's write moves etcd's revision; this watch sees no event for it.
	otherPrefix := "/registry/other/" + testNamespace(t) + "/"
	other := createPod(t, store, otherPrefix, newPod(t, "x", ""))
	t.Cleanup(func() { testClient.Delete(context.Background(), otherPrefix, clientv3.WithPrefix()) })
	deadline := time.After(eventTimeout)
	for {
		if err := store.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			pod, _ := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Bookmark || pod == nil || pod.Name != "" {
				t.Fatalf("got %s %#v, want an empty bookmark", ev.Type, ev.Object)
			}
			if rvOf(t, pod) >= rvOf(t, other) {
				return
			}
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no bookmark at etcd's revision")
		}
	}
}

func ptr[T any](v T) *T { return &v }
