// Package manager keeps the kubelet's copies of the API objects its pods refer to by
// name (ConfigMaps, Secrets) current with one watch per object, instead of a GET for
// every pod start and every volume resync. Mirrors
// k8s.io/kubernetes/pkg/kubelet/util/manager's watch-based manager.
package manager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"skiff.dev/services/internal/podutil"
)

// syncTimeout is how long Get waits for an object's first list; kube's is one second.
const syncTimeout = time.Second

// ListWatchFuncs lists and watches the objects of one namespace, the options carrying a
// metadata.name field selector (the Node authorizer allows a kubelet nothing wider).
type ListWatchFuncs struct {
	List  func(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	Watch func(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Manager caches the objects of one resource that registered pods refer to, each kept
// current by a reflector of its own (a list and watch selecting its name), started when
// the first pod refers to it and stopped when the last one is gone. An object that says
// it is immutable stops being watched once read. T is the object's pointer type.
type Manager[T runtime.Object] struct {
	resource   schema.GroupResource
	listWatch  ListWatchFuncs
	visitNames func(*v1.Pod, podutil.Visitor) bool
	immutable  func(T) bool

	mu      sync.Mutex
	items   map[types.NamespacedName]*item
	pods    map[types.UID]*v1.Pod // the registered pods, for what an update drops
	stopped bool
	running sync.WaitGroup // the reflectors
}

// item is one watched object: the pods referring to it and its reflector.
type item struct {
	refs   map[types.UID]struct{}
	store  *syncedStore
	cancel context.CancelFunc // stops the reflector; nil once stopped
}

// syncedStore is a cache.Store that records its first Replace: the reflector listed.
type syncedStore struct {
	cache.Store
	synced atomic.Bool
}

func (s *syncedStore) Replace(list []interface{}, rv string) error {
	defer s.synced.Store(true)
	return s.Store.Replace(list, rv)
}

// NewWatchBasedManager returns a Manager of resource whose objects lw reaches and pods
// refer to as visitNames walks; immutable tells when an object can no longer change.
func NewWatchBasedManager[T runtime.Object](resource schema.GroupResource, lw ListWatchFuncs, visitNames func(*v1.Pod, podutil.Visitor) bool, immutable func(T) bool) *Manager[T] {
	return &Manager[T]{resource: resource, listWatch: lw, visitNames: visitNames, immutable: immutable,
		items: map[types.NamespacedName]*item{}, pods: map[types.UID]*v1.Pod{}}
}

// names are the objects pod refers to.
func (m *Manager[T]) names(pod *v1.Pod) map[types.NamespacedName]struct{} {
	out := map[types.NamespacedName]struct{}{}
	m.visitNames(pod, func(name string) bool {
		out[types.NamespacedName{Namespace: pod.Namespace, Name: name}] = struct{}{}
		return true
	})
	return out
}

// RegisterPod records the objects pod refers to, starting a watch for each one no
// other pod referred to; a registered pod's update drops what it no longer refers to.
func (m *Manager[T]) RegisterPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	names := m.names(pod)
	for key := range names {
		it := m.items[key]
		if it == nil {
			it = m.start(key)
			m.items[key] = it
		}
		it.refs[pod.UID] = struct{}{}
	}
	if old := m.pods[pod.UID]; old != nil {
		for key := range m.names(old) {
			if _, kept := names[key]; !kept {
				m.release(key, pod.UID)
			}
		}
	}
	m.pods[pod.UID] = pod
}

// UnregisterPod forgets pod's references, stopping the watches no pod needs any more.
func (m *Manager[T]) UnregisterPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.pods[pod.UID]
	if old == nil {
		return
	}
	delete(m.pods, pod.UID)
	for key := range m.names(old) {
		m.release(key, pod.UID)
	}
}

// release drops uid's reference to key; m.mu is held.
func (m *Manager[T]) release(key types.NamespacedName, uid types.UID) {
	it := m.items[key]
	if it == nil {
		return
	}
	delete(it.refs, uid)
	if len(it.refs) == 0 {
		if it.cancel != nil {
			it.cancel()
		}
		delete(m.items, key)
	}
}

// start runs a reflector of key's object alone; m.mu is held.
func (m *Manager[T]) start(key types.NamespacedName) *item {
	ctx, cancel := context.WithCancel(context.Background())
	selector := fields.OneTermEqualSelector("metadata.name", key.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return m.listWatch.List(ctx, key.Namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return m.listWatch.Watch(ctx, key.Namespace, opts)
		},
	}
	var zero T
	store := &syncedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	reflector := cache.NewReflectorWithOptions(lw, zero, store, cache.ReflectorOptions{
		Name: fmt.Sprintf("object-%s %s/%s", m.resource, key.Namespace, key.Name)})
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		reflector.RunWithContext(ctx)
	}()
	return &item{refs: map[types.UID]struct{}{}, store: store, cancel: cancel}
}

// Stop ends every watch and waits for them; the Manager then forgets every pod and
// registers none.
func (m *Manager[T]) Stop() {
	m.mu.Lock()
	m.stopped = true
	for key, it := range m.items {
		if it.cancel != nil {
			it.cancel()
		}
		delete(m.items, key)
	}
	clear(m.pods)
	m.mu.Unlock()
	m.running.Wait()
}

// Get returns the object namespace/name as last watched, waiting up to a second for its
// first list. Errors: the object is referred to by no registered pod, its first list
// did not come in time, or a NotFound from the API when it does not exist.
func (m *Manager[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	var zero T
	key := types.NamespacedName{Namespace: namespace, Name: name}
	m.mu.Lock()
	it := m.items[key]
	m.mu.Unlock()
	if it == nil {
		return zero, fmt.Errorf("%s %q/%q not registered", m.resource, namespace, name)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, syncTimeout, true, func(context.Context) (bool, error) {
		return it.store.synced.Load(), nil
	}); err != nil {
		return zero, fmt.Errorf("failed to sync %s cache: %w", m.resource, err)
	}
	obj, exists, err := it.store.GetByKey(key.String())
	if err != nil {
		return zero, err
	}
	if !exists {
		return zero, apierrors.NewNotFound(m.resource, name)
	}
	object := obj.(T)
	if m.immutable(object) {
		m.mu.Lock()
		if it.cancel != nil { // it can no longer change: the cached copy is final
			it.cancel()
			it.cancel = nil
		}
		m.mu.Unlock()
	}
	return object, nil
}
