package cacher_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
	"skiff.dev/services/apiserver/storage/cacher"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// etcdClient talks to the one real embedded etcd every test and benchmark of this
// package shares; tests stay apart by key prefix (see newFixture).
var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &etcdClient))
}

// eventTimeout bounds how long a test waits for something that must happen; it only
// turns a hang into a failure.
const eventTimeout = 20 * time.Second

var podIndexFields = []string{"spec.nodeName"}

// podAttrs is the pod strategy's GetAttrs: the fields the scheduler and kubelet select on.
func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name": pod.Name, "metadata.namespace": pod.Namespace,
		"spec.nodeName": pod.Spec.NodeName, "status.phase": string(pod.Status.Phase),
	}, nil
}

func newPodStore(client *clientv3.Client) *etcd3.Store {
	return etcd3.New(client, scheme.StorageCodec, func() runtime.Object { return &corev1.Pod{} })
}

func podConfig(store storage.Interface, prefix string) cacher.Config {
	return cacher.Config{
		Storage: store, ResourcePrefix: prefix,
		Kind:        corev1.SchemeGroupVersion.WithKind("Pod"),
		NewFunc:     func() runtime.Object { return &corev1.Pod{} },
		NewListFunc: func() runtime.Object { return &corev1.PodList{} },
		GetAttrs:    podAttrs, IndexFields: podIndexFields,
	}
}

// fixture is a cache of pods over a real etcd3 store, under a key prefix of the test's
// own. Writes go to etcd directly, as another apiserver's would.
type fixture struct {
	t      *testing.T
	prefix string
	etcd   *etcd3.Store
	cache  *cacher.Cacher
}

// runs numbers the prefixes, so that -count=N runs do not meet each other's keys.
var runs atomic.Int64

func testPrefix(tb testing.TB) string {
	return fmt.Sprintf("/%s-%d/pods/", strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name()), runs.Add(1))
}

func newFixture(t *testing.T, tune func(*cacher.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, prefix: testPrefix(t), etcd: newPodStore(etcdClient)}
	f.cache = f.start(f.etcd, tune)
	return f
}

// start starts a cache of the fixture's prefix over store and stops it when the test ends.
func (f *fixture) start(store storage.Interface, tune func(*cacher.Config)) *cacher.Cacher {
	f.t.Helper()
	cfg := podConfig(store, f.prefix)
	if tune != nil {
		tune(&cfg)
	}
	c, err := cacher.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(c.Stop)
	return c
}

func (f *fixture) key(name string) string { return f.prefix + "default/" + name }

func newPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "nginx"}}},
	}
}

func (f *fixture) create(name, node string) *corev1.Pod {
	f.t.Helper()
	return f.createPod(newPod(name, node))
}

func (f *fixture) createPod(pod *corev1.Pod) *corev1.Pod {
	f.t.Helper()
	out := &corev1.Pod{}
	if err := f.etcd.Create(context.Background(), f.prefix+pod.Namespace+"/"+pod.Name, pod, out); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) setNode(name, node string) *corev1.Pod {
	f.t.Helper()
	out := &corev1.Pod{}
	err := f.etcd.GuaranteedUpdate(context.Background(), f.key(name), out, nil, func(in runtime.Object) (runtime.Object, error) {
		pod := in.(*corev1.Pod)
		pod.Spec.NodeName = node
		return pod, nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) delete(name string) *corev1.Pod {
	f.t.Helper()
	out := &corev1.Pod{}
	if err := f.etcd.Delete(context.Background(), f.key(name), out, nil); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// list lists the fixture's pods from the cache with opts.
func (f *fixture) list(opts storage.ListOptions) *corev1.PodList {
	f.t.Helper()
	list := &corev1.PodList{}
	if err := f.cache.GetList(context.Background(), f.prefix, opts, list); err != nil {
		f.t.Fatal(err)
	}
	return list
}

// catchUp waits until the cache is ready and has seen revision rv. (Before the cache
// is ready a list at rv is answered by etcd, so a list alone does not wait.)
func (f *fixture) catchUp(rv string) {
	f.t.Helper()
	eventually(f.t, "the cache is ready", f.cache.Ready)
	f.list(storage.ListOptions{ResourceVersion: rv})
}

// etcdList lists the fixture's pods from etcd with pred.
func (f *fixture) etcdList(pred storage.SelectionPredicate) *corev1.PodList {
	f.t.Helper()
	list := &corev1.PodList{}
	if err := f.etcd.GetList(context.Background(), f.prefix, storage.ListOptions{Predicate: pred}, list); err != nil {
		f.t.Fatal(err)
	}
	return list
}

func (f *fixture) watch(opts storage.ListOptions) watch.Interface {
	f.t.Helper()
	return startWatch(f.t, f.cache, f.prefix, opts)
}

func startWatch(t *testing.T, c *cacher.Cacher, key string, opts storage.ListOptions) watch.Interface {
	t.Helper()
	w, err := c.Watch(context.Background(), key, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// nodePredicate selects the pods of one node, the way a kubelet's watch does.
func nodePredicate(node string) storage.SelectionPredicate {
	return storage.SelectionPredicate{Field: fields.OneTermEqualSelector("spec.nodeName", node),
		Label: labels.Everything(), GetAttrs: podAttrs, IndexFields: podIndexFields}
}

// nextEvent returns the next event, bookmarks included.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed, want an event")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatal("no event")
	}
	return watch.Event{}
}

// next returns the next event that is not a bookmark.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	for {
		if ev := nextEvent(t, w); ev.Type != watch.Bookmark {
			return ev
		}
	}
}

// nextN returns the next n non-bookmark events, described.
func nextN(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var got []string
	for range n {
		got = append(got, describe(next(t, w)))
	}
	return got
}

func expectClosed(t *testing.T, w watch.Interface) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch not closed")
		}
	}
}

// describe is "TYPE name@resourceVersion".
func describe(ev watch.Event) string {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return fmt.Sprintf("%s %T", ev.Type, ev.Object)
	}
	return fmt.Sprintf("%s %s@%s", ev.Type, m.GetName(), m.GetResourceVersion())
}

func ev(typ watch.EventType, pod *corev1.Pod) string {
	return fmt.Sprintf("%s %s@%s", typ, pod.Name, pod.ResourceVersion)
}

// summary is "name@resourceVersion node" per item, in order.
func summary(list *corev1.PodList) []string {
	out := []string{}
	for _, p := range list.Items {
		out = append(out, fmt.Sprintf("%s/%s@%s %s", p.Namespace, p.Name, p.ResourceVersion, p.Spec.NodeName))
	}
	return out
}

// eventually polls cond every 10 ms until it holds, failing after eventTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, eventTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: not within %s", what, eventTimeout)
	}
}

// interruptible is the Storage of a cache whose own list and watch a test can hold back
// and break (the cache's calls carry its watch stream name, the ResourcePrefix);
// everything else, and every call of the cache's, reaches the real etcd3 store.
type interruptible struct {
	*etcd3.Store
	prefix string

	mu      sync.Mutex
	hold    chan struct{} // while set, the cache's list and watch wait until it is closed
	current watch.Interface
	lists   int
}

func (s *interruptible) cacheCall(ctx context.Context) (bool, error) {
	if storage.WatchStream(ctx) != s.prefix {
		return false, nil
	}
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	return true, nil
}

func (s *interruptible) GetList(ctx context.Context, key string, opts storage.ListOptions, list runtime.Object) error {
	if mine, err := s.cacheCall(ctx); err != nil {
		return err
	} else if mine {
		s.mu.Lock()
		s.lists++
		s.mu.Unlock()
	}
	return s.Store.GetList(ctx, key, opts, list)
}

func (s *interruptible) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	mine, err := s.cacheCall(ctx)
	if err != nil {
		return nil, err
	}
	w, err := s.Store.Watch(ctx, key, opts)
	if mine && err == nil {
		s.mu.Lock()
		s.current = w
		s.mu.Unlock()
	}
	return w, err
}

// holdBack makes the cache's next list and watch calls wait until release.
func (s *interruptible) holdBack() {
	s.mu.Lock()
	s.hold = make(chan struct{})
	s.mu.Unlock()
}

func (s *interruptible) release() {
	s.mu.Lock()
	close(s.hold)
	s.hold = nil
	s.mu.Unlock()
}

// breakWatch ends the cache's current etcd watch, as a lost connection would.
func (s *interruptible) breakWatch(t *testing.T) {
	t.Helper()
	var w watch.Interface
	eventually(t, "the cache watches", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		w, s.current = s.current, nil
		return w != nil
	})
	w.Stop()
}

func (s *interruptible) listCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}
