package history

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

var dsKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

func parent(name string, uid types.UID) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid}}
}

func raw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func TestControllerRevisionNameTruncatesLongPrefixes(t *testing.T) {
	if got := ControllerRevisionName("web", "abc"); got != "web-abc" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("a", 300)
	got := ControllerRevisionName(long, "abc")
	if len(got) != 223+len("-abc") || !strings.HasSuffix(got, "-abc") {
		t.Errorf("got %d bytes: %q", len(got), got)
	}
}

func TestHashControllerRevision(t *testing.T) {
	a := &appsv1.ControllerRevision{Data: raw(`{"a":1}`)}
	b := &appsv1.ControllerRevision{Data: raw(`{"a":2}`)}
	if HashControllerRevision(a, nil) != HashControllerRevision(a.DeepCopy(), nil) {
		t.Error("the same data hashes differently")
	}
	if HashControllerRevision(a, nil) == HashControllerRevision(b, nil) {
		t.Error("different data hash the same")
	}
	one, two := int32(1), int32(2)
	if HashControllerRevision(a, &one) == HashControllerRevision(a, &two) || HashControllerRevision(a, &one) == HashControllerRevision(a, nil) {
		t.Error("the collision count does not change the hash")
	}
	for _, c := range HashControllerRevision(a, nil) {
		if strings.ContainsRune("aeiou013", c) {
			t.Errorf("hash %q is not SafeEncodeString'd", HashControllerRevision(a, nil))
		}
	}
}

func TestNewControllerRevision(t *testing.T) {
	ds := parent("web", "uid-1")
	count := int32(0)
	cr, err := NewControllerRevision(ds, dsKind, map[string]string{"app": "web"}, raw(`{"spec":{}}`), 3, &count)
	if err != nil {
		t.Fatal(err)
	}
	hash := HashControllerRevision(cr, &count)
	ref := metav1.GetControllerOf(cr)
	switch {
	case cr.Name != "web-"+hash, cr.Labels[ControllerRevisionHashLabel] != hash, cr.Labels["app"] != "web":
		t.Errorf("name %q labels %v, hash %q", cr.Name, cr.Labels, hash)
	case ref == nil || ref.UID != "uid-1" || ref.Kind != "DaemonSet" || ref.APIVersion != "apps/v1" || !*ref.BlockOwnerDeletion:
		t.Errorf("controller reference %+v", ref)
	case cr.Revision != 3 || string(cr.Data.Raw) != `{"spec":{}}`:
		t.Errorf("revision %d data %s", cr.Revision, cr.Data.Raw)
	}
}

func TestSortControllerRevisions(t *testing.T) {
	now := metav1.Now()
	later := metav1.NewTime(now.Add(time.Second))
	revs := []*appsv1.ControllerRevision{
		{ObjectMeta: metav1.ObjectMeta{Name: "c", CreationTimestamp: now}, Revision: 2},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: later}, Revision: 1},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: later}, Revision: 1},
		{ObjectMeta: metav1.ObjectMeta{Name: "d", CreationTimestamp: now}, Revision: 1},
	}
	SortControllerRevisions(revs)
	var names []string
	for _, r := range revs {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "d,a,b,c" {
		t.Errorf("order %s, want d,a,b,c (revision, then age, then name)", got)
	}
}

func TestEqualAndFindEqualRevisions(t *testing.T) {
	a := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: raw(`{"x":1}`)}
	a2 := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "a2"}, Data: raw(`{"x":1}`)}
	b := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Data: raw(`{"x":2}`)}
	if !EqualRevision(nil, nil) || EqualRevision(a, nil) || !EqualRevision(a, a2) || EqualRevision(a, b) {
		t.Error("EqualRevision compares data")
	}
	// Differing numeric hash labels settle it, whatever the data.
	h1 := a.DeepCopy()
	h1.Labels = map[string]string{ControllerRevisionHashLabel: "1"}
	h2 := a2.DeepCopy()
	h2.Labels = map[string]string{ControllerRevisionHashLabel: "2"}
	if EqualRevision(h1, h2) {
		t.Error("revisions with different hashes are equal")
	}
	found := FindEqualRevisions([]*appsv1.ControllerRevision{a, b, a2}, a)
	if len(found) != 2 || found[0].Name != "a" || found[1].Name != "a2" {
		t.Errorf("found %v", found)
	}
}

// newRealHistory is a realHistory over a fake clientset holding objs, with its
// ControllerRevision lister fed from the same objects.
func newRealHistory(t *testing.T, objs ...*appsv1.ControllerRevision) (Interface, *fake.Clientset) {
	t.Helper()
	var ros []runtime.Object
	for _, o := range objs {
		ros = append(ros, o)
	}
	cs := fake.NewClientset(ros...)
	informer := informers.NewSharedInformerFactory(cs, 0).Apps().V1().ControllerRevisions()
	for _, o := range objs {
		if err := informer.Informer().GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return NewHistory(cs, informer.Lister()), cs
}

func TestRealHistoryListsOwnedAndOrphanedRevisions(t *testing.T) {
	ds := parent("web", "uid-1")
	mine, _ := NewControllerRevision(ds, dsKind, map[string]string{"app": "web"}, raw(`{"a":1}`), 1, nil)
	mine.Namespace = "default"
	theirs, _ := NewControllerRevision(parent("other", "uid-2"), dsKind, map[string]string{"app": "web"}, raw(`{"a":1}`), 1, nil)
	theirs.Namespace = "default"
	orphan := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: "default", Labels: map[string]string{"app": "web"}}, Data: raw(`{}`)}
	unmatched := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "unmatched", Namespace: "default", Labels: map[string]string{"app": "db"}}, Data: raw(`{}`)}
	elsewhere := orphan.DeepCopy()
	elsewhere.Namespace = "other"
	h, _ := newRealHistory(t, mine, theirs, orphan, unmatched, elsewhere)
	got, err := h.ListControllerRevisions(ds, labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	SortControllerRevisions(got)
	var names []string
	for _, r := range got {
		names = append(names, r.Namespace+"/"+r.Name)
	}
	if len(got) != 2 || !strings.Contains(strings.Join(names, " "), "default/orphan") || !strings.Contains(strings.Join(names, " "), "default/"+mine.Name) {
		t.Errorf("listed %v, want default/%s and default/orphan", names, mine.Name)
	}
}

func TestRealHistoryCreateResolvesNameCollisions(t *testing.T) {
	ctx := context.Background()
	ds := parent("web", "uid-1")
	count := int32(0)
	want, _ := NewControllerRevision(ds, dsKind, nil, raw(`{"a":1}`), 1, &count)
	// Another revision with other data already holds the name the first hash gives.
	squatter := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: "default"}, Data: raw(`{"other":true}`)}
	h, cs := newRealHistory(t, squatter)

	created, err := h.CreateControllerRevision(ctx, ds, want, &count)
	if err != nil {
		t.Fatal(err)
	}
	if count != 1 {
		t.Errorf("collisionCount %d, want 1", count)
	}
	if created.Name == squatter.Name || created.Name != "web-"+HashControllerRevision(want, &count) || created.Namespace != "default" {
		t.Errorf("created %s/%s", created.Namespace, created.Name)
	}

	// Creating the same data again finds it: no new revision, no new collision.
	again, err := h.CreateControllerRevision(ctx, ds, want, &count)
	if err != nil || again.Name != created.Name || count != 1 {
		t.Errorf("second create: %v %s count %d", err, again.Name, count)
	}
	list, _ := cs.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Errorf("%d revisions stored, want 2", len(list.Items))
	}
	if _, err := h.CreateControllerRevision(ctx, ds, want, nil); err == nil {
		t.Error("a nil collisionCount is accepted")
	}
}

func TestRealHistoryUpdateDeleteAdoptRelease(t *testing.T) {
	ctx := context.Background()
	ds := parent("web", "uid-1")
	orphan := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", UID: "cr-uid"}, Data: raw(`{}`), Revision: 1}
	h, cs := newRealHistory(t, orphan)

	updated, err := h.UpdateControllerRevision(ctx, orphan, 4)
	if err != nil || updated.Revision != 4 {
		t.Fatalf("update: %v %+v", err, updated)
	}
	if orphan.Revision != 1 {
		t.Error("UpdateControllerRevision changed its argument")
	}

	adopted, err := h.AdoptControllerRevision(ctx, ds, dsKind, orphan)
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(adopted); ref == nil || ref.UID != "uid-1" || ref.Kind != "DaemonSet" {
		t.Fatalf("adopted revision's controller %+v", ref)
	}
	if _, err := h.AdoptControllerRevision(ctx, parent("other", "uid-2"), dsKind, adopted); err == nil {
		t.Error("adopting a revision another controller owns succeeded")
	}

	released, err := h.ReleaseControllerRevision(ctx, ds, adopted)
	if err != nil {
		t.Fatal(err)
	}
	if len(released.OwnerReferences) != 0 {
		t.Errorf("released revision still owned: %+v", released.OwnerReferences)
	}

	if err := h.DeleteControllerRevision(ctx, released); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().ControllerRevisions("default").Get(ctx, "web-1", metav1.GetOptions{}); err == nil {
		t.Error("revision still there after delete")
	}
	// Releasing a revision that is gone is not an error.
	if got, err := h.ReleaseControllerRevision(ctx, ds, released); err != nil || got != nil {
		t.Errorf("release of a deleted revision: %v %v", got, err)
	}
}

func TestFakeHistoryCreateCountsCollisions(t *testing.T) {
	ctx := context.Background()
	informer := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Apps().V1().ControllerRevisions()
	h := NewFakeHistory(informer)
	ds := parent("web", "uid-1")
	count := int32(0)
	a, _ := NewControllerRevision(ds, dsKind, nil, raw(`{"a":1}`), 1, &count)
	squatter := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: a.Name, Namespace: "default"}, Data: raw(`{"b":1}`)}
	_ = informer.Informer().GetIndexer().Add(squatter)
	created, err := h.CreateControllerRevision(ctx, ds, a, &count)
	if err != nil || count != 1 || created.Name == a.Name {
		t.Fatalf("create: %v count %d name %s", err, count, created.Name)
	}
	list, _ := h.ListControllerRevisions(ds, labels.Everything())
	if len(list) != 2 {
		t.Errorf("%d revisions, want 2", len(list))
	}
}
