// Package cacher is the apiserver's watch cache: one etcd watch per resource feeds an
// in-memory copy of the resource and a ring of its recent events, from which every
// watch and every read that accepts a not-quite-latest state is served. It mirrors
// k8s.io/apiserver/pkg/storage/cacher (cacher.go, watch_cache.go, cache_watcher.go).
//
// A Cacher decorates the storage.Interface beneath it (etcd3): writes, Gets at
// resourceVersion "" and paged lists go through to it, everything else (consistent lists
// too, once the cache has caught up with etcd) is answered from memory.
//
// Sharing rule: objects handed out by the cache, i.e. GetList items (shallow copies
// whose maps and slices are the cache's) and watch event objects (one object shared by
// every watcher), must not be mutated; the apiserver only encodes them, and the cache
// stamps each object's kind (Config.Kind) before sharing it so that encoding need not
// write. Get returns a deep copy, and bookmark objects are each watcher's own.
package cacher

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/storage"
)

// Config is what one Cacher caches and how.
type Config struct {
	// Storage is the store beneath (an *etcd3.Store); writes, consistent reads and the
	// cache's own list and watch go to it.
	Storage storage.Interface
	// RequestProgress asks Storage to send a progress bookmark on the watch stream named
	// in ctx (see storage.WithWatchStream), so the cache learns that it has seen every
	// change up to etcd's current revision even when its resource is idle. Default:
	// Storage's own RequestProgress method, if it has one (etcd3.Store does). Without
	// either, a read at a newer resourceVersion waits for the resource's next change.
	RequestProgress func(ctx context.Context) error
	// ResourcePrefix is the resource's collection key, e.g. "/registry/pods/" (a
	// missing trailing "/" is added). Required.
	ResourcePrefix string
	// Kind, when set, is stamped on every cached object and bookmark before it is
	// shared, so readers can encode it without writing to it.
	Kind schema.GroupVersionKind
	// NewFunc returns an empty object of the resource (e.g. &corev1.Pod{}), NewListFunc
	// an empty list (e.g. &corev1.PodList{}). Required.
	NewFunc     func() runtime.Object
	NewListFunc func() runtime.Object
	// GetAttrs returns an object's labels and selectable fields: the cache applies
	// watchers' and lists' selectors to them and takes index values from them.
	// Required.
	GetAttrs storage.AttrFunc
	// IndexFields are fields of GetAttrs' field set (e.g. "spec.nodeName") by which
	// objects and watchers are indexed. A list or watch whose Predicate names the field
	// in IndexFields and whose field selector requires one exact value only looks at,
	// and is only offered events of, objects that have (or had) that value. Mirrors
	// cacher's indexers and indexedTrigger.
	IndexFields []string
	// EventRingSize is how many recent events are kept for watches that resume from a
	// resourceVersion. A fixed capacity (kube sizes its ring dynamically); default 1000.
	// A resume from before the ring is replayed from etcd's history when etcd still has
	// it (see Watch), else it gets 410 Expired.
	EventRingSize int
	// BookmarkInterval is how often watchers that allow bookmarks get one. Default 5 s.
	BookmarkInterval time.Duration
	// WatcherBufferSize bounds each watcher's queue of undelivered events (plus, for a
	// watch that starts with the current state, one slot per initial event). A watcher
	// whose queue stays full for longer than the dispatch budget (at most 100 ms) is
	// closed, and its client re-watches, rather than hold up the others or grow memory.
	// Default 100.
	WatcherBufferSize int
}

// Defaults of Config.
const (
	DefaultEventRingSize     = 1000
	DefaultBookmarkInterval  = 5 * time.Second
	DefaultWatcherBufferSize = 100
)

// freshnessTimeout bounds how long a read or watch at a resourceVersion newer than the
// cache (or one that arrives before the cache's first list) waits for the cache to catch
// up before it fails with storage.ErrResourceVersionTooLarge, as kube's
// waitUntilFreshAndBlock does.
const freshnessTimeout = 3 * time.Second

// Cacher is storage.Interface over Config.Storage with a watch cache. New starts it and
// Stop ends it; it is safe for concurrent use. Mirrors cacher's Cacher.
type Cacher struct {
	cfg             Config
	requestProgress func(ctx context.Context) error // nil when Storage cannot
	progress        *progressRequester

	// mu guards the cached state. Lock order: mu, then watchersMu.
	mu    sync.RWMutex
	ready bool
	// rv is the revision up to which the cache has applied every change.
	rv      uint64
	objects *objectStore
	ring    *eventRing
	// advanced is closed (and replaced) whenever rv or readiness advances.
	advanced chan struct{}

	watchersMu sync.Mutex
	watchers   *watcherIndex
	stopped    bool // no new watchers once Stop has begun

	// budget and the dispatch buffers are only used by the reflector goroutine.
	budget     timeBudget
	targetsBuf []*cacheWatcher
	blockedBuf []*cacheWatcher

	// backfillMu serialises backfills (see backfill).
	backfillMu sync.Mutex

	stopCh  chan struct{}
	cancel  context.CancelFunc
	workers sync.WaitGroup // the reflector, the progress requester and every watcher
}

var _ storage.Interface = (*Cacher)(nil)

// New starts a Cacher: a goroutine lists Config.Storage and then watches it, feeding the
// cache, until Stop. It returns at once; Ready tells when the first list has landed.
// Returns an error if a required Config field is missing.
func New(cfg Config) (*Cacher, error) {
	if cfg.Storage == nil || cfg.NewFunc == nil || cfg.NewListFunc == nil || cfg.GetAttrs == nil || cfg.ResourcePrefix == "" {
		return nil, errors.New("cacher: Storage, NewFunc, NewListFunc, GetAttrs and ResourcePrefix are required")
	}
	if !strings.HasSuffix(cfg.ResourcePrefix, "/") {
		cfg.ResourcePrefix += "/"
	}
	if cfg.EventRingSize <= 0 {
		cfg.EventRingSize = DefaultEventRingSize
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = DefaultBookmarkInterval
	}
	if cfg.WatcherBufferSize <= 0 {
		cfg.WatcherBufferSize = DefaultWatcherBufferSize
	}
	c := &Cacher{
		cfg:             cfg,
		requestProgress: cfg.RequestProgress,
		objects:         newObjectStore(cfg.IndexFields, nil),
		ring:            newEventRing(cfg.EventRingSize, 0),
		advanced:        make(chan struct{}),
		watchers:        newWatcherIndex(),
		budget:          newTimeBudget(),
		stopCh:          make(chan struct{}),
	}
	if c.requestProgress == nil {
		if p, ok := cfg.Storage.(interface{ RequestProgress(context.Context) error }); ok {
			c.requestProgress = p.RequestProgress
		}
	}
	ctx, cancel := context.WithCancel(storage.WithWatchStream(context.Background(), cfg.ResourcePrefix))
	c.cancel = cancel
	c.progress = newProgressRequester(c.requestProgress)
	c.workers.Add(2)
	go func() { defer c.workers.Done(); c.reflect(ctx) }()
	go func() { defer c.workers.Done(); c.progress.run(ctx) }()
	return c, nil
}

// Stop ends the reflector, closes every watcher's result channel and waits until all of
// the cache's goroutines have exited. Calls after the first do nothing more; Watch then
// fails and reads go to Storage.
func (c *Cacher) Stop() {
	c.watchersMu.Lock()
	if c.stopped {
		c.watchersMu.Unlock()
		c.workers.Wait()
		return
	}
	c.stopped = true
	c.watchers.terminateAll()
	c.watchersMu.Unlock()
	close(c.stopCh)
	c.cancel()
	c.workers.Wait()
	c.mu.Lock()
	c.ready = false
	c.mu.Unlock()
}

// Ready reports whether the cache has completed its first list (and has not been
// stopped). Until then Get and GetList go to Storage and Watch waits (see Watch).
func (c *Cacher) Ready() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ready
}

// Stats are how many objects the cache holds and their estimated average size in
// bytes (the protobuf size of up to statsSample of them; 0 when they have no protobuf
// form, as custom resources); ok is false until its first list (and after Stop). They
// are kube's storage.Interface Stats, which API Priority and Fairness's list work
// estimator reads.
func (c *Cacher) Stats() (count int, averageSize int64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready || c.objects == nil {
		return 0, 0, false
	}
	var sampled, total int64
	for _, e := range c.objects.byKey {
		if sampled == statsSample {
			break
		}
		sized, isSized := e.obj.(interface{ Size() int })
		if !isSized {
			break
		}
		total += int64(sized.Size())
		sampled++
	}
	if sampled > 0 {
		averageSize = total / sampled
	}
	return len(c.objects.byKey), averageSize, true
}

// statsSample is how many objects Stats sizes.
const statsSample = 100

// Create delegates to Storage.
func (c *Cacher) Create(ctx context.Context, key string, obj, out runtime.Object) error {
	return c.cfg.Storage.Create(ctx, key, obj, out)
}

// GuaranteedUpdate delegates to Storage, offering it a copy of the cached object to
// start from when Storage is a storage.CachedUpdater and the cache holds the key: the
// write is conditional on that copy's revision, so a stale copy costs a retry, and a
// current one (the usual case) saves a read of etcd and a decode per update. Mirrors
// kube's Cacher (CacheDelegator) passing cachedExistingObject.
func (c *Cacher) GuaranteedUpdate(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) error {
	if updater, ok := c.cfg.Storage.(storage.CachedUpdater); ok && c.Ready() {
		c.mu.RLock()
		e := c.objects.get(key)
		c.mu.RUnlock()
		if e != nil {
			return updater.GuaranteedUpdateFrom(ctx, key, out, preconditions, tryUpdate, e.obj.DeepCopyObject())
		}
	}
	return c.cfg.Storage.GuaranteedUpdate(ctx, key, out, preconditions, tryUpdate)
}

// Delete delegates to Storage.
func (c *Cacher) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions) error {
	return c.cfg.Storage.Delete(ctx, key, out, preconditions)
}

// Get implements storage.Interface.Get. opts.ResourceVersion "" (a consistent read)
// goes to Storage, as does every Get before the cache is ready. "0" reads the cache as it
// is; N waits until the cache has seen revision N (at most 3 s, then an error wrapping
// storage.ErrResourceVersionTooLarge) and reads it. out receives a deep copy. Errors:
// *StorageError ErrCodeKeyNotFound (unless opts.IgnoreNotFound), and
// storage.ErrInvalidResourceVersion for a malformed resourceVersion. Mirrors Cacher.Get.
func (c *Cacher) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	if opts.ResourceVersion == "" || !c.Ready() {
		return c.cfg.Storage.Get(ctx, key, opts, out)
	}
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if err := c.waitUntilFreshAndRLock(ctx, rv); err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	defer c.mu.RUnlock()
	e := c.objects.get(key)
	if e == nil {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(out)
		}
		return storage.NewKeyNotFoundError(key, int64(c.rv))
	}
	return copyInto(e.obj, out)
}

// GetList implements storage.Interface.GetList. What kube's shouldDelegateList sends to
// etcd goes to Storage unchanged: a continue token, ResourceVersionMatch other than
// NotOlderThan (Exact), and a limit with a resourceVersion other than "0" (a paged list
// at N, or a paged consistent list, is read page by page from etcd). Before the cache is
// ready every list goes to Storage too, a resourceVersion N as NotOlderThan N.
//
// The rest is served from the cache: resourceVersion "0" as the cache is, N once the
// cache has seen revision N (at most 3 s, then an error wrapping
// storage.ErrResourceVersionTooLarge). A consistent list (resourceVersion "", no limit)
// reads etcd's current revision (one count-only range) and is served from the cache
// once the cache has seen it; if the cache cannot catch up within 3 s it is read from
// Storage instead, as kube-apiserver's ConsistentListFromCache (beta, on by default
// since 1.31). Items are in key order, the list's resourceVersion is the cache's
// revision, and a limit is ignored (the whole list, no continue token, as kube's cache
// answers resourceVersion="0"). A field selector that pins an indexed field
// (Config.IndexFields, Predicate.IndexFields) reads only that value's objects. The items
// share the cache's objects (see the package's sharing rule).
func (c *Cacher) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if shouldDelegateList(opts) {
		return c.cfg.Storage.GetList(ctx, key, opts, listObj)
	}
	if !c.Ready() {
		if opts.ResourceVersion != "0" && opts.ResourceVersion != "" {
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
		return c.cfg.Storage.GetList(ctx, key, opts, listObj)
	}
	consistent := opts.ResourceVersion == ""
	var rv uint64
	var err error
	if consistent {
		rv, err = c.currentRevision(ctx)
	} else {
		rv, err = parseResourceVersion(opts.ResourceVersion)
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", key, err)
	}
	prefix := key
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if err := c.waitUntilFreshAndRLock(ctx, rv); err != nil {
		if consistent && errors.Is(err, storage.ErrResourceVersionTooLarge) {
			return c.cfg.Storage.GetList(ctx, key, opts, listObj)
		}
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	entries := c.objects.list(prefix, indexedValue(opts.Predicate, c.cfg.IndexFields))
	listRV := c.rv
	c.mu.RUnlock()

	items := make([]runtime.Object, 0, len(entries))
	for _, e := range entries {
		if e.matches(opts.Predicate) {
			items = append(items, e.obj)
		}
	}
	if err := meta.SetList(listObj, items); err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	l, err := meta.ListAccessor(listObj)
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	l.SetResourceVersion(strconv.FormatUint(listRV, 10))
	l.SetContinue("")
	return nil
}

// VisitCached implements storage.CachedReader. It holds the cache's read lock while
// visit runs, and reads an indexed field's objects only when p pins one.
func (c *Cacher) VisitCached(prefix string, p storage.SelectionPredicate, visit func(runtime.Object) bool) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready {
		return false
	}
	for _, e := range c.objects.list(prefix, indexedValue(p, c.cfg.IndexFields)) {
		if e.matches(p) && !visit(e.obj) {
			break
		}
	}
	return true
}

// ReadCached implements storage.CachedReader, under the cache's read lock.
func (c *Cacher) ReadCached(key string, read func(runtime.Object)) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready {
		return false
	}
	if e := c.objects.get(key); e != nil {
		read(e.obj)
	}
	return true
}

// shouldDelegateList reports whether a list must be read from Storage. Mirrors
// kube 1.32 cacher's shouldDelegateList with ConsistentListFromCache on.
func shouldDelegateList(opts storage.ListOptions) bool {
	match := opts.ResourceVersionMatch
	return opts.Predicate.Continue != "" ||
		(opts.Predicate.Limit > 0 && opts.ResourceVersion != "0") ||
		(match != "" && match != metav1.ResourceVersionMatchNotOlderThan)
}

// waitUntilFreshAndRLock waits until the cache is ready and has seen every change up to
// rv, then returns with c.mu read-locked. It asks Storage for progress notifications
// meanwhile, so an idle resource catches up with etcd at once. It gives up after
// freshnessTimeout with an error wrapping storage.ErrResourceVersionTooLarge, and
// returns ctx's error if ctx ends first. Mirrors watchCache.waitUntilFreshAndBlock.
func (c *Cacher) waitUntilFreshAndRLock(ctx context.Context, rv uint64) error {
	var deadline <-chan time.Time
	for {
		c.mu.RLock()
		if c.ready && c.rv >= rv {
			return nil
		}
		advanced, ready, have := c.advanced, c.ready, c.rv
		c.mu.RUnlock()
		if deadline == nil {
			timer := time.NewTimer(freshnessTimeout)
			defer timer.Stop()
			deadline = timer.C
			defer c.progress.want()()
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stopCh:
			return fmt.Errorf("watch cache of %s is stopped: %w", c.cfg.ResourcePrefix, storage.ErrResourceVersionTooLarge)
		case <-deadline:
			if !ready {
				return fmt.Errorf("watch cache of %s is not ready: %w", c.cfg.ResourcePrefix, storage.ErrResourceVersionTooLarge)
			}
			return fmt.Errorf("watch cache of %s is at revision %d, asked for %d: %w", c.cfg.ResourcePrefix, have, rv, storage.ErrResourceVersionTooLarge)
		}
	}
}

// currentRevision returns etcd's current revision: Storage's CurrentRevision if it has
// one (etcd3.Store), else the resourceVersion of a one-item list.
func (c *Cacher) currentRevision(ctx context.Context) (uint64, error) {
	if s, ok := c.cfg.Storage.(interface {
		CurrentRevision(context.Context) (int64, error)
	}); ok {
		rev, err := s.CurrentRevision(ctx)
		return uint64(max(rev, 0)), err
	}
	list := c.cfg.NewListFunc()
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1}}, list); err != nil {
		return 0, err
	}
	return listResourceVersion(list)
}

// copyInto deep-copies a cached object into out, a pointer to the same type.
func copyInto(obj, out runtime.Object) error {
	if out == nil {
		return nil
	}
	src, dst := reflect.ValueOf(obj.DeepCopyObject()), reflect.ValueOf(out)
	if src.Type() != dst.Type() {
		return fmt.Errorf("cacher: cannot copy %T into %T", obj, out)
	}
	dst.Elem().Set(src.Elem())
	return nil
}

// parseResourceVersion returns the revision rv names; "" and "0" are 0.
func parseResourceVersion(rv string) (uint64, error) {
	if rv == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", storage.ErrInvalidResourceVersion, rv)
	}
	return v, nil
}

func objectResourceVersion(obj runtime.Object) (uint64, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0, err
	}
	return parseResourceVersion(m.GetResourceVersion())
}

func listResourceVersion(list runtime.Object) (uint64, error) {
	l, err := meta.ListAccessor(list)
	if err != nil {
		return 0, err
	}
	return parseResourceVersion(l.GetResourceVersion())
}
