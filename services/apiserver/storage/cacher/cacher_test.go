package cacher_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/storage"
)

func TestListFromCacheMatchesEtcd(t *testing.T) {
	f := newFixture(t, nil)
	// Created out of key order, in two namespaces, some bound, one relabelled.
	for _, p := range []struct{ ns, name, node string }{
		{"default", "c", "n1"}, {"default", "a", "n2"}, {"kube-system", "b", "n1"}, {"default", "b", ""},
	} {
		pod := newPod(p.name, p.node)
		pod.Namespace = p.ns
		f.createPod(pod)
	}
	f.setNode("b", "n1")
	last := f.delete("a")
	// Wait until the cache has seen the last write; then "0" answers the same.
	f.catchUp(last.ResourceVersion)

	for _, tc := range []struct {
		name string
		pred storage.SelectionPredicate
	}{
		{"everything", storage.SelectionPredicate{}},
		{"by label", storage.SelectionPredicate{Label: labels.SelectorFromSet(labels.Set{"app": "web"}), GetAttrs: podAttrs}},
		{"by indexed field", nodePredicate("n1")},
		{"by a field the cache does not index", storage.SelectionPredicate{
			Field: fields.OneTermEqualSelector("metadata.namespace", "kube-system"), GetAttrs: podAttrs}},
		{"by an unscheduled node", nodePredicate("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := f.list(storage.ListOptions{ResourceVersion: "0", Predicate: tc.pred})
			want := summary(f.etcdList(tc.pred))
			if got := summary(cached); !slices.Equal(got, want) {
				t.Errorf("from the cache: %v\nfrom etcd:       %v", got, want)
			}
			if rv, _ := strconv.ParseUint(cached.ResourceVersion, 10, 64); rv < mustRV(t, last.ResourceVersion) {
				t.Errorf("list resourceVersion %s, want at least %s", cached.ResourceVersion, last.ResourceVersion)
			}
			visited := &corev1.PodList{}
			if !f.cache.VisitCached(f.prefix, tc.pred, func(obj runtime.Object) bool {
				visited.Items = append(visited.Items, *obj.(*corev1.Pod))
				return true
			}) {
				t.Fatal("VisitCached: the ready cache did not serve the read")
			}
			if got := summary(visited); !slices.Equal(got, want) {
				t.Errorf("visited in the cache: %v\nfrom etcd:            %v", got, want)
			}
		})
	}

	t.Run("of one namespace", func(t *testing.T) {
		list := &corev1.PodList{}
		if err := f.cache.GetList(context.Background(), f.prefix+"default", storage.ListOptions{ResourceVersion: "0"}, list); err != nil {
			t.Fatal(err)
		}
		want := &corev1.PodList{}
		if err := f.etcd.GetList(context.Background(), f.prefix+"default/", storage.ListOptions{}, want); err != nil {
			t.Fatal(err)
		}
		if got := summary(list); !slices.Equal(got, summary(want)) || len(got) != 2 {
			t.Errorf("namespace default from the cache: %v, from etcd: %v", got, summary(want))
		}
	})
}

func TestListAtAResourceVersionWaitsUntilTheCacheHasIt(t *testing.T) {
	f := newFixture(t, nil)
	f.create("a", "")
	f.catchUp("1") // the cache is ready

	t.Run("a write the cache may not have seen yet", func(t *testing.T) {
		b := f.create("b", "")
		list := f.list(storage.ListOptions{ResourceVersion: b.ResourceVersion})
		if got := summary(list); len(got) != 2 || got[1] != "default/b@"+b.ResourceVersion+" " {
			t.Errorf("list at %s: %v, want a and b", b.ResourceVersion, got)
		}
	})
	t.Run("a revision of another resource, while this one is idle", func(t *testing.T) {
		other := &corev1.Pod{}
		if err := f.etcd.Create(context.Background(), testPrefix(t)+"other", newPod("x", ""), other); err != nil {
			t.Fatal(err)
		}
		list := f.list(storage.ListOptions{ResourceVersion: other.ResourceVersion,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if mustRV(t, list.ResourceVersion) < mustRV(t, other.ResourceVersion) || len(list.Items) != 2 {
			t.Errorf("list at %s: resourceVersion %s, %d items", other.ResourceVersion, list.ResourceVersion, len(list.Items))
		}
	})
	t.Run("a revision etcd has not reached is too large", func(t *testing.T) {
		current, _ := f.etcd.CurrentRevision(context.Background())
		err := f.cache.GetList(context.Background(), f.prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(current+1000, 10)}, &corev1.PodList{})
		if !errors.Is(err, storage.ErrResourceVersionTooLarge) {
			t.Errorf("list at a future revision: %v, want ErrResourceVersionTooLarge", err)
		}
	})
}

func TestListsTheCacheCannotServeGoToEtcd(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	f.create("b", "")
	f.create("c", "")
	last := f.setNode("a", "n1")
	f.catchUp(last.ResourceVersion)

	f.create("d", "")
	t.Run("exact, at an old revision", func(t *testing.T) {
		list := f.list(storage.ListOptions{ResourceVersion: a.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if got := summary(list); !slices.Equal(got, []string{"default/a@" + a.ResourceVersion + " "}) {
			t.Errorf("exact list at %s: %v, want only a, unscheduled", a.ResourceVersion, got)
		}
	})
	t.Run("paged at a resourceVersion, then continued", func(t *testing.T) {
		first := f.list(storage.ListOptions{ResourceVersion: last.ResourceVersion, Predicate: storage.SelectionPredicate{Limit: 2}})
		if got := summary(first); len(got) != 2 || first.Continue == "" {
			t.Fatalf("first page: %v continue %q, want a, b and a continue token", got, first.Continue)
		}
		rest := f.list(storage.ListOptions{Predicate: storage.SelectionPredicate{Continue: first.Continue}})
		if got := summary(rest); len(got) != 1 || got[0] != "default/c@"+rest.Items[0].ResourceVersion+" " || rest.ResourceVersion != last.ResourceVersion {
			t.Errorf("second page at %s: %v, want only c at %s", rest.ResourceVersion, got, last.ResourceVersion)
		}
	})
	t.Run("consistent and paged, as kubectl lists", func(t *testing.T) {
		first := f.list(storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 2}})
		if got := summary(first); len(got) != 2 || first.Continue == "" {
			t.Errorf("first page of a consistent list: %v continue %q, want two pods and a continue token", got, first.Continue)
		}
	})
	t.Run("a limit at resourceVersion 0 is served whole from the cache", func(t *testing.T) {
		current, _ := f.etcd.CurrentRevision(context.Background())
		f.catchUp(strconv.FormatInt(current, 10))
		list := f.list(storage.ListOptions{ResourceVersion: "0", Predicate: storage.SelectionPredicate{Limit: 1}})
		if len(list.Items) != 4 || list.Continue != "" {
			t.Errorf("limited list at 0: %v continue %q, want every pod", summary(list), list.Continue)
		}
	})
}

func TestConsistentListIsServedFromTheCacheOnceItHasCaughtUp(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "")
	f.catchUp(a.ResourceVersion)

	b := f.create("b", "") // no wait: a consistent read must see it
	list := f.list(storage.ListOptions{})
	if got := summary(list); len(got) != 2 || list.Items[1].ResourceVersion != b.ResourceVersion {
		t.Fatalf("consistent list: %v, want a and b@%s", got, b.ResourceVersion)
	}
	if mustRV(t, list.ResourceVersion) < mustRV(t, b.ResourceVersion) {
		t.Errorf("consistent list at %s, want at least %s", list.ResourceVersion, b.ResourceVersion)
	}
	// From the cache, the items share the cached objects' maps; etcd decodes new ones.
	cached := f.list(storage.ListOptions{ResourceVersion: "0"})
	if !sameMap(list.Items[1].Labels, cached.Items[1].Labels) {
		t.Error("the consistent list was read from etcd, want the cache once it has caught up")
	}
	if sameMap(f.etcdList(storage.SelectionPredicate{}).Items[1].Labels, cached.Items[1].Labels) {
		t.Error("etcd's list shares the cache's maps: the check above cannot tell them apart")
	}
}

func TestConsistentListFallsBackToEtcdWhenTheCacheLags(t *testing.T) {
	f, store := newInterruptibleFixture(t, false)
	a := f.create("a", "")
	f.catchUp(a.ResourceVersion)
	store.holdBack() // the cache's next watch waits: it cannot catch up
	defer store.release()
	store.breakWatch(t)

	b := f.create("b", "")
	list := f.list(storage.ListOptions{})
	if got := summary(list); len(got) != 2 || list.Items[1].ResourceVersion != b.ResourceVersion {
		t.Errorf("consistent list while the cache lags: %v, want a and b@%s from etcd", got, b.ResourceVersion)
	}
}

func TestCachedReadsHandOverTheCachedObjects(t *testing.T) {
	f := newFixture(t, nil)
	f.create("a", "n1")
	last := f.create("b", "n1")
	f.catchUp(last.ResourceVersion)

	var seen []*corev1.Pod
	f.cache.VisitCached(f.prefix, nodePredicate("n1"), func(obj runtime.Object) bool {
		seen = append(seen, obj.(*corev1.Pod))
		return false // stop at the first
	})
	if len(seen) != 1 || seen[0].Name != "a" {
		t.Fatalf("visited %d pods, want only the first (a) when visit stops", len(seen))
	}
	// Not a copy: the pod shares its maps with what a resourceVersion="0" list serves.
	cached := f.list(storage.ListOptions{ResourceVersion: "0"})
	if !sameMap(seen[0].Labels, cached.Items[0].Labels) {
		t.Error("VisitCached handed over a copy, want the cache's own object")
	}
	var read []*corev1.Pod
	for _, name := range []string{"b", "missing"} {
		if !f.cache.ReadCached(f.key(name), func(obj runtime.Object) { read = append(read, obj.(*corev1.Pod)) }) {
			t.Fatalf("ReadCached(%s): the ready cache did not serve the read", name)
		}
	}
	if len(read) != 1 || read[0].Name != "b" || !sameMap(read[0].Labels, cached.Items[1].Labels) {
		t.Errorf("ReadCached read %d pods, want only b, the cache's own", len(read))
	}

	t.Run("not before the cache is ready", func(t *testing.T) {
		f, store := newInterruptibleFixture(t, true) // the first list is held back
		defer store.release()
		called := false
		if f.cache.VisitCached(f.prefix, storage.SelectionPredicate{}, func(runtime.Object) bool { called = true; return true }) || called {
			t.Error("VisitCached served a read before the cache was ready")
		}
		if f.cache.ReadCached(f.key("a"), func(runtime.Object) { called = true }) || called {
			t.Error("ReadCached served a read before the cache was ready")
		}
	})
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestGetFromCache(t *testing.T) {
	f := newFixture(t, nil)
	a := f.create("a", "n1")
	f.catchUp(a.ResourceVersion)

	t.Run("returns a copy the caller may change", func(t *testing.T) {
		out := &corev1.Pod{}
		if err := f.cache.Get(context.Background(), f.key("a"), storage.GetOptions{ResourceVersion: "0"}, out); err != nil {
			t.Fatal(err)
		}
		if out.ResourceVersion != a.ResourceVersion || out.Spec.NodeName != "n1" {
			t.Fatalf("Get = %s@%s on %q, want a@%s on n1", out.Name, out.ResourceVersion, out.Spec.NodeName, a.ResourceVersion)
		}
		out.Labels["app"] = "changed"
		again := &corev1.Pod{}
		if err := f.cache.Get(context.Background(), f.key("a"), storage.GetOptions{ResourceVersion: "0"}, again); err != nil {
			t.Fatal(err)
		}
		if again.Labels["app"] != "web" {
			t.Errorf("a caller's change reached the cache: app=%q", again.Labels["app"])
		}
	})
	t.Run("at a resourceVersion waits for it", func(t *testing.T) {
		moved := f.setNode("a", "n2")
		out := &corev1.Pod{}
		if err := f.cache.Get(context.Background(), f.key("a"), storage.GetOptions{ResourceVersion: moved.ResourceVersion}, out); err != nil {
			t.Fatal(err)
		}
		if out.Spec.NodeName != "n2" {
			t.Errorf("Get at %s: node %q, want n2", moved.ResourceVersion, out.Spec.NodeName)
		}
	})
	t.Run("missing", func(t *testing.T) {
		err := f.cache.Get(context.Background(), f.key("missing"), storage.GetOptions{ResourceVersion: "0"}, &corev1.Pod{})
		if !storage.IsNotFound(err) {
			t.Errorf("Get of a missing key: %v, want IsNotFound", err)
		}
		out := newPod("leftover", "n9")
		if err := f.cache.Get(context.Background(), f.key("missing"), storage.GetOptions{ResourceVersion: "0", IgnoreNotFound: true}, out); err != nil || out.Name != "" {
			t.Errorf("Get with IgnoreNotFound: %v, out %q, want nil and a zero pod", err, out.Name)
		}
	})
	t.Run("malformed resourceVersion", func(t *testing.T) {
		err := f.cache.Get(context.Background(), f.key("a"), storage.GetOptions{ResourceVersion: "x"}, &corev1.Pod{})
		if !errors.Is(err, storage.ErrInvalidResourceVersion) {
			t.Errorf("Get at %q: %v, want ErrInvalidResourceVersion", "x", err)
		}
	})
}

func TestWritesGoThroughToEtcd(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	created := &corev1.Pod{}
	if err := f.cache.Create(ctx, f.key("a"), newPod("a", ""), created); err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Create(ctx, f.key("a"), newPod("a", ""), nil); !storage.IsExist(err) {
		t.Errorf("second create: %v, want IsExist", err)
	}
	stale := created.DeepCopy()
	if err := f.cache.GuaranteedUpdate(ctx, f.key("a"), &corev1.Pod{}, nil, func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		pod.Spec.NodeName = "n1"
		return pod, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.cache.GuaranteedUpdate(ctx, f.key("a"), &corev1.Pod{}, nil, func(runtime.Object) (runtime.Object, error) {
		return stale, nil
	}); !storage.IsConflict(err) {
		t.Errorf("update from a stale resourceVersion: %v, want IsConflict", err)
	}
	if err := f.cache.Delete(ctx, f.key("a"), &corev1.Pod{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := summary(f.etcdList(storage.SelectionPredicate{})); len(got) != 0 {
		t.Errorf("etcd after the delete: %v", got)
	}
}

func mustRV(t *testing.T, rv string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return v
}

// TestStatsCountAndSizeTheCachedObjects: once ready, Stats counts the cached objects and
// gives their average protobuf size, for API Priority and Fairness's list cost.
func TestStatsCountAndSizeTheCachedObjects(t *testing.T) {
	f := newFixture(t, nil)
	var last *corev1.Pod
	for _, name := range []string{"a", "b", "c"} {
		last = f.create(name, "n1")
	}
	f.catchUp(last.ResourceVersion)
	n, size, ok := f.cache.Stats()
	if !ok || n != 3 {
		t.Fatalf("Stats = %d objects, ok %v; want 3, true", n, ok)
	}
	if want := int64(last.Size()); size < want/2 || size > want*2 {
		t.Errorf("average size %d, want about a pod's protobuf size, %d", size, want)
	}
}
