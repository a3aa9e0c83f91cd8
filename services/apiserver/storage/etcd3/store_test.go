package etcd3_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/etcd3"
)

func TestCreateReturnsStoredObjectAtPutRevision(t *testing.T) {
	store, prefix := newTestStore(t)
	ctx := testContext(t)
	before, err := store.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}

	out := createPod(t, store, prefix, newPod(t, "a", ""))

	if got, want := rvOf(t, out), before+1; got != want {
		t.Errorf("resourceVersion = %d, want the put's revision %d", got, want)
	}
	if out.Name != "a" || out.Spec.Containers[0].Image != "nginx" {
		t.Errorf("out = %+v, want the created pod", out)
	}
	raw, err := testClient.Get(ctx, prefix+"a")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Kvs[0].Value), "resourceVersion") {
		t.Errorf("stored bytes contain a resourceVersion: %s", raw.Kvs[0].Value)
	}
}

func TestCreateErrors(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "taken", ""))
	withRV := newPod(t, "with-rv", "")
	withRV.ResourceVersion = "7"

	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		check func(error) bool
	}{
		{"existing key is IsExist", newPod(t, "taken", ""), storage.IsExist},
		{"object with a resourceVersion is refused", withRV, func(err error) bool {
			return errors.Is(err, etcd3.ErrResourceVersionSetOnCreate)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Create(testContext(t), prefix+tc.pod.Name, tc.pod, &corev1.Pod{})
			if !tc.check(err) {
				t.Errorf("Create error = %v", err)
			}
		})
	}
}

func TestGet(t *testing.T) {
	store, prefix := newTestStore(t)
	created := createPod(t, store, prefix, newPod(t, "a", "node-1"))

	t.Run("existing key returns the object at its ModRevision", func(t *testing.T) {
		out := &corev1.Pod{}
		if err := store.Get(testContext(t), prefix+"a", storage.GetOptions{}, out); err != nil {
			t.Fatal(err)
		}
		if out.ResourceVersion != created.ResourceVersion || out.Spec.NodeName != "node-1" {
			t.Errorf("Get = rv %s node %q, want rv %s node node-1", out.ResourceVersion, out.Spec.NodeName, created.ResourceVersion)
		}
	})
	t.Run("missing key is IsNotFound", func(t *testing.T) {
		err := store.Get(testContext(t), prefix+"missing", storage.GetOptions{}, &corev1.Pod{})
		if !storage.IsNotFound(err) {
			t.Errorf("Get error = %v, want IsNotFound", err)
		}
	})
	t.Run("missing key with IgnoreNotFound zeroes out", func(t *testing.T) {
		out := newPod(t, "leftover", "node-9")
		if err := store.Get(testContext(t), prefix+"missing", storage.GetOptions{IgnoreNotFound: true}, out); err != nil {
			t.Fatal(err)
		}
		if out.Name != "" || out.Spec.NodeName != "" {
			t.Errorf("out = %+v, want zero", out)
		}
	})
}

// setNode returns an UpdateFunc that binds the pod to node.
func setNode(node string) storage.UpdateFunc {
	return func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		pod.Spec.NodeName = node
		return pod, nil
	}
}

func TestGuaranteedUpdateWritesAtNewRevision(t *testing.T) {
	store, prefix := newTestStore(t)
	created := createPod(t, store, prefix, newPod(t, "a", ""))

	out := &corev1.Pod{}
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", out, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}
	if out.Spec.NodeName != "node-1" || rvOf(t, out) <= rvOf(t, created) {
		t.Errorf("out = node %q rv %s, want node-1 at an rv after %s", out.Spec.NodeName, out.ResourceVersion, created.ResourceVersion)
	}
	got := &corev1.Pod{}
	if err := store.Get(testContext(t), prefix+"a", storage.GetOptions{}, got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != out.ResourceVersion || got.Spec.NodeName != "node-1" {
		t.Errorf("stored = node %q rv %s, want what GuaranteedUpdate returned", got.Spec.NodeName, got.ResourceVersion)
	}
}

func TestGuaranteedUpdateNoOpKeepsResourceVersion(t *testing.T) {
	store, prefix := newTestStore(t)
	created := createPod(t, store, prefix, newPod(t, "a", "node-1"))

	out := &corev1.Pod{}
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", out, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}
	if out.ResourceVersion != created.ResourceVersion {
		t.Errorf("resourceVersion = %s, want unchanged %s", out.ResourceVersion, created.ResourceVersion)
	}
	if rev, err := store.CurrentRevision(testContext(t)); err != nil || rev != rvOf(t, created) {
		t.Errorf("etcd revision = %d (%v), want no write after %s", rev, err, created.ResourceVersion)
	}
}

func TestGuaranteedUpdateErrors(t *testing.T) {
	store, prefix := newTestStore(t)
	created := createPod(t, store, prefix, newPod(t, "a", ""))
	// The pod as a client read it before someone else changed it.
	stale := created.DeepCopy()
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", &corev1.Pod{}, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}
	otherUID := types.UID("someone-else")
	staleRV := created.ResourceVersion
	errRefused := errors.New("refused by tryUpdate")

	for _, tc := range []struct {
		name          string
		key           string
		preconditions *storage.Preconditions
		tryUpdate     storage.UpdateFunc
		check         func(error) bool
	}{
		{
			name: "returned object with a stale resourceVersion is IsConflict",
			key:  "a",
			tryUpdate: func(runtime.Object) (runtime.Object, error) {
				put := stale.DeepCopy()
				put.Spec.NodeName = "node-2"
				return put, nil
			},
			check: storage.IsConflict,
		},
		{
			name:          "UID precondition mismatch is IsInvalidObj",
			key:           "a",
			preconditions: &storage.Preconditions{UID: &otherUID},
			tryUpdate:     setNode("node-2"),
			check:         storage.IsInvalidObj,
		},
		{
			name:          "resourceVersion precondition mismatch is IsInvalidObj",
			key:           "a",
			preconditions: &storage.Preconditions{ResourceVersion: &staleRV},
			tryUpdate:     setNode("node-2"),
			check:         storage.IsInvalidObj,
		},
		{
			name:      "missing key is IsNotFound",
			key:       "missing",
			tryUpdate: setNode("node-2"),
			check:     storage.IsNotFound,
		},
		{
			name: "tryUpdate's error is returned unchanged",
			key:  "a",
			tryUpdate: func(runtime.Object) (runtime.Object, error) {
				return nil, errRefused
			},
			check: func(err error) bool { return err == errRefused },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.GuaranteedUpdate(testContext(t), prefix+tc.key, &corev1.Pod{}, tc.preconditions, tc.tryUpdate)
			if !tc.check(err) {
				t.Errorf("GuaranteedUpdate error = %v", err)
			}
		})
	}

	got := &corev1.Pod{}
	if err := store.Get(testContext(t), prefix+"a", storage.GetOptions{}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "node-1" {
		t.Errorf("after refused updates node = %q, want node-1", got.Spec.NodeName)
	}
}

// TestGuaranteedUpdateFromCachedCopy starts updates from a copy of the object, as the
// watch cache offers it: a current copy is written from; a stale one never decides an
// answer, which is always the one a read of etcd gives.
func TestGuaranteedUpdateFromCachedCopy(t *testing.T) {
	store, prefix := newTestStore(t)
	// label adds a label to whatever state it is given.
	label := func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		pod.Labels["seen"] = "yes"
		return pod, nil
	}
	for _, tc := range []struct {
		name          string
		stale         bool // the copy is from before the pod was bound to node-1
		preconditions func(current *corev1.Pod) *storage.Preconditions
		tryUpdate     func(current *corev1.Pod) storage.UpdateFunc
		wantNode      string
		wantLabel     bool
		wantNoWrite   bool
	}{
		{name: "current copy", tryUpdate: func(*corev1.Pod) storage.UpdateFunc { return label }, wantNode: "node-1", wantLabel: true},
		{name: "stale copy: the change applies to etcd's state", stale: true,
			tryUpdate: func(*corev1.Pod) storage.UpdateFunc { return label }, wantNode: "node-1", wantLabel: true},
		{name: "stale copy: a client's current resourceVersion is no conflict", stale: true,
			tryUpdate: func(current *corev1.Pod) storage.UpdateFunc {
				return func(runtime.Object) (runtime.Object, error) {
					put := current.DeepCopy()
					put.Labels["seen"] = "yes"
					return put, nil
				}
			}, wantNode: "node-1", wantLabel: true},
		{name: "stale copy: a precondition on the current resourceVersion holds", stale: true,
			preconditions: func(current *corev1.Pod) *storage.Preconditions {
				return &storage.Preconditions{ResourceVersion: &current.ResourceVersion}
			},
			tryUpdate: func(*corev1.Pod) storage.UpdateFunc { return label }, wantNode: "node-1", wantLabel: true},
		{name: "stale copy: unchanged from the copy is still a change to etcd's state", stale: true,
			tryUpdate: func(*corev1.Pod) storage.UpdateFunc { return setNode("") }, wantNode: ""},
		{name: "current copy: unchanged writes nothing",
			tryUpdate: func(*corev1.Pod) storage.UpdateFunc { return setNode("node-1") }, wantNode: "node-1", wantNoWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.NewReplacer(" ", "-", ":", "", "'", "").Replace(tc.name)
			created := createPod(t, store, prefix, newPod(t, name, ""))
			current := &corev1.Pod{}
			if err := store.GuaranteedUpdate(testContext(t), prefix+name, current, nil, setNode("node-1")); err != nil {
				t.Fatal(err)
			}
			cached := current.DeepCopy()
			if tc.stale {
				cached = created.DeepCopy()
			}
			var preconditions *storage.Preconditions
			if tc.preconditions != nil {
				preconditions = tc.preconditions(current)
			}
			out := &corev1.Pod{}
			if err := store.GuaranteedUpdateFrom(testContext(t), prefix+name, out, preconditions, tc.tryUpdate(current), cached); err != nil {
				t.Fatalf("GuaranteedUpdateFrom: %v", err)
			}
			got := &corev1.Pod{}
			if err := store.Get(testContext(t), prefix+name, storage.GetOptions{}, got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.NodeName != tc.wantNode || (got.Labels["seen"] == "yes") != tc.wantLabel {
				t.Errorf("stored node %q labels %v, want node %q, label seen %v", got.Spec.NodeName, got.Labels, tc.wantNode, tc.wantLabel)
			}
			if out.ResourceVersion != got.ResourceVersion {
				t.Errorf("out resourceVersion %s, stored %s", out.ResourceVersion, got.ResourceVersion)
			}
			if wrote := got.ResourceVersion != current.ResourceVersion; wrote == tc.wantNoWrite {
				t.Errorf("wrote = %v (rv %s -> %s), want %v", wrote, current.ResourceVersion, got.ResourceVersion, !tc.wantNoWrite)
			}
		})
	}

	t.Run("stale copy of a deleted object is IsNotFound", func(t *testing.T) {
		created := createPod(t, store, prefix, newPod(t, "deleted", ""))
		if err := store.Delete(testContext(t), prefix+"deleted", &corev1.Pod{}, nil); err != nil {
			t.Fatal(err)
		}
		err := store.GuaranteedUpdateFrom(testContext(t), prefix+"deleted", &corev1.Pod{}, nil, label, created.DeepCopy())
		if !storage.IsNotFound(err) {
			t.Errorf("GuaranteedUpdateFrom error = %v, want IsNotFound", err)
		}
	})
	t.Run("stale copy: a precondition etcd's state fails is refused", func(t *testing.T) {
		created := createPod(t, store, prefix, newPod(t, "precondition", ""))
		if err := store.GuaranteedUpdate(testContext(t), prefix+"precondition", &corev1.Pod{}, nil, setNode("node-1")); err != nil {
			t.Fatal(err)
		}
		staleRV := created.ResourceVersion
		err := store.GuaranteedUpdateFrom(testContext(t), prefix+"precondition", &corev1.Pod{},
			&storage.Preconditions{ResourceVersion: &staleRV}, label, created.DeepCopy())
		if !storage.IsInvalidObj(err) {
			t.Errorf("GuaranteedUpdateFrom error = %v, want IsInvalidObj", err)
		}
	})
}

func TestGuaranteedUpdatePreconditionMessageMatchesKubernetes(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	other := types.UID("x")

	err := store.GuaranteedUpdate(testContext(t), prefix+"a", &corev1.Pod{},
		&storage.Preconditions{UID: &other}, setNode("n"))

	want := "Precondition failed: UID in precondition: x, UID in object meta: uid-a"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error = %v, want it to contain %q", err, want)
	}
}

func TestGuaranteedUpdateConcurrentWritersLoseNoUpdate(t *testing.T) {
	const writers, incrementsEach = 8, 5
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "counter", ""))
	increment := func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		n, _ := strconv.Atoi(pod.Annotations["count"])
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations["count"] = strconv.Itoa(n + 1)
		return pod, nil
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers*incrementsEach)
	for range writers {
		wg.Go(func() {
			for range incrementsEach {
				errs <- store.GuaranteedUpdate(testContext(t), prefix+"counter", &corev1.Pod{}, nil, increment)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	got := &corev1.Pod{}
	if err := store.Get(testContext(t), prefix+"counter", storage.GetOptions{}, got); err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(writers * incrementsEach); got.Annotations["count"] != want {
		t.Errorf("count = %s, want %s", got.Annotations["count"], want)
	}
}

func TestDelete(t *testing.T) {
	otherUID := types.UID("someone-else")
	wrongRV := "1"
	for _, tc := range []struct {
		name          string
		preconditions func(created *corev1.Pod) *storage.Preconditions
		check         func(error) bool // nil: the delete succeeds
	}{
		{name: "no preconditions deletes", preconditions: func(*corev1.Pod) *storage.Preconditions { return nil }},
		{name: "matching UID and resourceVersion delete", preconditions: func(p *corev1.Pod) *storage.Preconditions {
			return &storage.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}
		}},
		{name: "UID mismatch is IsInvalidObj", check: storage.IsInvalidObj, preconditions: func(*corev1.Pod) *storage.Preconditions {
			return &storage.Preconditions{UID: &otherUID}
		}},
		{name: "resourceVersion mismatch is IsInvalidObj", check: storage.IsInvalidObj, preconditions: func(*corev1.Pod) *storage.Preconditions {
			return &storage.Preconditions{ResourceVersion: &wrongRV}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, prefix := newTestStore(t)
			created := createPod(t, store, prefix, newPod(t, "a", "node-1"))

			out := &corev1.Pod{}
			err := store.Delete(testContext(t), prefix+"a", out, tc.preconditions(created))

			getErr := store.Get(testContext(t), prefix+"a", storage.GetOptions{}, &corev1.Pod{})
			if tc.check != nil {
				if !tc.check(err) {
					t.Errorf("Delete error = %v", err)
				}
				if getErr != nil {
					t.Errorf("refused delete removed the object: Get error = %v", getErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !storage.IsNotFound(getErr) {
				t.Errorf("after delete Get error = %v, want IsNotFound", getErr)
			}
			rev, _ := store.CurrentRevision(testContext(t))
			if out.Spec.NodeName != "node-1" || rvOf(t, out) != rev {
				t.Errorf("out = node %q rv %s, want the last state at the delete's revision %d", out.Spec.NodeName, out.ResourceVersion, rev)
			}
		})
	}
}

func TestDeleteMissingKeyIsNotFound(t *testing.T) {
	store, prefix := newTestStore(t)
	if err := store.Delete(testContext(t), prefix+"missing", &corev1.Pod{}, nil); !storage.IsNotFound(err) {
		t.Errorf("Delete error = %v, want IsNotFound", err)
	}
}

// names lists the pod names of a list, in order.
func names(list *corev1.PodList) []string {
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

func TestGetListFiltersWithPredicate(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", "node-1"))
	createPod(t, store, prefix, newPod(t, "b", "node-2"))
	createPod(t, store, prefix, newPod(t, "c", "node-1"))
	rev, _ := store.CurrentRevision(testContext(t))

	list := &corev1.PodList{}
	err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: storage.SelectionPredicate{
		Field: fields.OneTermEqualSelector("spec.nodeName", "node-1"), GetAttrs: podAttrs,
	}}, list)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(list), ","); got != "a,c" {
		t.Errorf("items = %s, want a,c", got)
	}
	if list.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("list resourceVersion = %s, want current revision %d", list.ResourceVersion, rev)
	}
	if list.Items[0].ResourceVersion == "" {
		t.Error("items carry no resourceVersion")
	}
}

func TestGetListOfCollectionKeyExcludesSiblingPrefix(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	sibling := strings.TrimSuffix(prefix, "/") + "2/"
	t.Cleanup(func() { testClient.Delete(context.Background(), sibling, clientv3.WithPrefix()) })
	createPod(t, store, sibling, newPod(t, "b", ""))

	list := &corev1.PodList{}
	if err := store.GetList(testContext(t), strings.TrimSuffix(prefix, "/"), storage.ListOptions{}, list); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(list), ","); got != "a" {
		t.Errorf("items = %s, want a", got)
	}
}

func TestGetListAtOldRevisionSeesOldState(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	old, _ := store.CurrentRevision(testContext(t))
	createPod(t, store, prefix, newPod(t, "b", ""))
	if err := store.GuaranteedUpdate(testContext(t), prefix+"a", &corev1.Pod{}, nil, setNode("node-1")); err != nil {
		t.Fatal(err)
	}

	list := &corev1.PodList{}
	opts := storage.ListOptions{ResourceVersion: strconv.FormatInt(old, 10)}
	if err := store.GetList(testContext(t), prefix, opts, list); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(list), ","); got != "a" || list.Items[0].Spec.NodeName != "" {
		t.Errorf("items = %s (a's node %q), want only a, unscheduled", got, list.Items[0].Spec.NodeName)
	}
	if list.ResourceVersion != opts.ResourceVersion {
		t.Errorf("list resourceVersion = %s, want %s", list.ResourceVersion, opts.ResourceVersion)
	}
}

func TestGetListAtCompactedRevisionIsTooOld(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	old, _ := store.CurrentRevision(testContext(t))
	createPod(t, store, prefix, newPod(t, "b", ""))
	compacted := compactAll(t)

	err := store.GetList(testContext(t), prefix, storage.ListOptions{ResourceVersion: strconv.FormatInt(old, 10)}, &corev1.PodList{})
	if !storage.IsTooOldResourceVersion(err) {
		t.Fatalf("GetList error = %v, want IsTooOldResourceVersion", err)
	}
	if want := fmt.Sprintf("too old resource version: %d (%d)", old, compacted); !strings.Contains(err.Error(), want) {
		t.Errorf("error = %v, want it to say %q", err, want)
	}
}

func TestGetListPagingReturnsEveryItemOnceAtOneRevision(t *testing.T) {
	store, prefix := newTestStore(t)
	var all []string
	for i := range 10 {
		node := "node-1"
		if i%3 == 0 {
			node = "node-2"
		}
		name := fmt.Sprintf("pod-%02d", i)
		createPod(t, store, prefix, newPod(t, name, node))
		if node == "node-1" {
			all = append(all, name)
		}
	}
	onNode1 := storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", "node-1"), GetAttrs: podAttrs}

	for _, limit := range []int64{1, 2, 3, 6, 7, 100} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var got []string
			pred := onNode1
			pred.Limit = limit
			firstRV := ""
			for page := 0; ; page++ {
				if page > len(all)+1 {
					t.Fatal("paging does not end")
				}
				list := &corev1.PodList{}
				if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: pred}, list); err != nil {
					t.Fatal(err)
				}
				if int64(len(list.Items)) > limit {
					t.Errorf("page of %d items, limit %d", len(list.Items), limit)
				}
				if firstRV == "" {
					firstRV = list.ResourceVersion
					// A write between pages must not show up: pages read at one revision.
					late := newPod(t, fmt.Sprintf("late-%d", limit), "node-1")
					createPod(t, store, prefix, late)
					t.Cleanup(func() { _ = store.Delete(testContext(t), prefix+late.Name, &corev1.Pod{}, nil) })
				} else if list.ResourceVersion != firstRV {
					t.Errorf("page resourceVersion = %s, want the first page's %s", list.ResourceVersion, firstRV)
				}
				got = append(got, names(list)...)
				if list.Continue == "" {
					break
				}
				pred.Continue = list.Continue
			}
			if strings.Join(got, ",") != strings.Join(all, ",") {
				t.Errorf("paged items = %v, want each of %v once", got, all)
			}
		})
	}
}

// TestGetListCountsTheRemainingItems: an unfiltered page that leaves items for later
// says how many (remainingItemCount, as kube's store and the conformance suite's
// chunking test expect); a filtered one and the last page do not.
func TestGetListCountsTheRemainingItems(t *testing.T) {
	store, prefix := newTestStore(t)
	for i := range 7 {
		createPod(t, store, prefix, newPod(t, fmt.Sprintf("pod-%02d", i), "node-1"))
	}
	pred := storage.SelectionPredicate{Limit: 3}
	for _, want := range []int64{4, 1, -1} {
		list := &corev1.PodList{}
		if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: pred}, list); err != nil {
			t.Fatal(err)
		}
		switch {
		case want < 0 && list.RemainingItemCount != nil:
			t.Errorf("last page: remainingItemCount = %d, want none", *list.RemainingItemCount)
		case want >= 0 && (list.RemainingItemCount == nil || *list.RemainingItemCount != want):
			t.Errorf("remainingItemCount = %v, want %d", list.RemainingItemCount, want)
		}
		pred.Continue = list.Continue
	}
	filtered := storage.SelectionPredicate{Limit: 3, Field: fields.OneTermEqualSelector("spec.nodeName", "node-1"), GetAttrs: podAttrs}
	list := &corev1.PodList{}
	if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: filtered}, list); err != nil {
		t.Fatal(err)
	}
	if list.Continue == "" || list.RemainingItemCount != nil {
		t.Errorf("filtered page: continue %q, remainingItemCount %v; want a token and no count", list.Continue, list.RemainingItemCount)
	}
}

// TestGetListContinueAtCompactedRevision: a continue token whose revision is compacted
// gets kube's 410 carrying a token that goes on from the same key at the latest
// revision, whose pages then count what remains.
func TestGetListContinueAtCompactedRevision(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	createPod(t, store, prefix, newPod(t, "b", ""))
	first := &corev1.PodList{}
	if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1}}, first); err != nil {
		t.Fatal(err)
	}
	createPod(t, store, prefix, newPod(t, "c", ""))
	compactAll(t)

	err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1, Continue: first.Continue}}, &corev1.PodList{})
	status, ok := err.(apierrors.APIStatus)
	if !ok || !apierrors.IsResourceExpired(err) || status.Status().Continue == "" {
		t.Fatalf("GetList error = %v, want 410 Expired with a continue token", err)
	}
	next := &corev1.PodList{}
	if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1, Continue: status.Status().Continue}}, next); err != nil {
		t.Fatal(err)
	}
	if len(next.Items) != 1 || next.Items[0].Name != "b" || next.ResourceVersion == first.ResourceVersion ||
		next.Continue == "" || next.RemainingItemCount == nil || *next.RemainingItemCount != 1 {
		t.Errorf("inconsistent page: %d items (%v), rv %s (first %s), continue %q, remaining %v; want b at the latest revision, c to come",
			len(next.Items), next.Items, next.ResourceVersion, first.ResourceVersion, next.Continue, next.RemainingItemCount)
	}
}

func TestGetListRejectsBadArguments(t *testing.T) {
	store, prefix := newTestStore(t)
	createPod(t, store, prefix, newPod(t, "a", ""))
	createPod(t, store, prefix, newPod(t, "b", ""))
	first := &corev1.PodList{}
	if err := store.GetList(testContext(t), prefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1}}, first); err != nil {
		t.Fatal(err)
	}
	future, _ := store.CurrentRevision(testContext(t))
	future += 1000

	for _, tc := range []struct {
		name string
		opts storage.ListOptions
		want error
	}{
		{"malformed resourceVersion", storage.ListOptions{ResourceVersion: "abc"}, storage.ErrInvalidResourceVersion},
		{"negative resourceVersion", storage.ListOptions{ResourceVersion: "-5"}, storage.ErrInvalidResourceVersion},
		{"continue token that is not base64", storage.ListOptions{Predicate: storage.SelectionPredicate{Continue: "!!"}}, storage.ErrInvalidContinue},
		{"continue token that is not JSON", storage.ListOptions{Predicate: storage.SelectionPredicate{Continue: "bm90LWpzb24"}}, storage.ErrInvalidContinue},
		{"continue token with a resourceVersion", storage.ListOptions{ResourceVersion: first.ResourceVersion,
			Predicate: storage.SelectionPredicate{Continue: first.Continue}}, storage.ErrInvalidContinue},
		{"resourceVersion etcd has not reached", storage.ListOptions{ResourceVersion: strconv.FormatInt(future, 10)}, storage.ErrResourceVersionTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.GetList(testContext(t), prefix, tc.opts, &corev1.PodList{})
			if !errors.Is(err, tc.want) {
				t.Errorf("GetList error = %v, want %v", err, tc.want)
			}
		})
	}
}
