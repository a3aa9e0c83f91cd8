// Package cacher is the apiserver's watch cache: one etcd watch per resource feeds an
// in-memory copy of the resource and a ring of its recent events, from which every
// watch and every resourceVersion="0" read is served. It mirrors
// k8s.io/apiserver/pkg/storage/cacher (cacher.go, watch_cache.go, cache_watcher.go).
//
// Sharing rule: objects handed out by the cache (list items, watch event objects) are
// shared between all readers and must not be mutated. The apiserver only encodes them.
package cacher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// Config is what one Cacher caches.
type Config struct {
	// Storage is the store beneath (etcd3); writes and consistent reads go to it.
	Storage storage.Interface
	// RequestProgress, if set, asks Storage to send a progress bookmark on the cache's
	// watch, so the cache learns that it is current even when its resource is idle
	// (etcd3.Store.RequestProgress). Without it, a consistent WatchList waits for the
	// next event of the resource.
	RequestProgress func(ctx context.Context) error
	// ResourcePrefix is the resource's collection key, e.g. "/registry/pods/".
	ResourcePrefix string
	// Kind, when set, is stamped on every cached object before it is shared, so readers
	// can encode it without writing to it.
	Kind schema.GroupVersionKind
	// NewFunc returns an empty object, NewListFunc an empty list, of the resource.
	NewFunc     func() runtime.Object
	NewListFunc func() runtime.Object
	// GetAttrs returns an object's labels and selectable fields.
	GetAttrs storage.AttrFunc
	// IndexFields are fields (e.g. "spec.nodeName") by which objects and watchers are
	// indexed: a watcher whose field selector requires one exact value is only offered
	// events of objects that have, or had, that value.
	IndexFields []string
	// EventRingSize is how many recent events are kept for watches that resume from a
	// resourceVersion; older ones get 410 Expired. Default 1000.
	EventRingSize int
	// BookmarkInterval is how often watchers that allow bookmarks get one. Default 5 s.
	BookmarkInterval time.Duration
	// WatcherBufferSize bounds each watcher's queue of undelivered events; a watcher
	// whose queue is full is closed (its client re-watches) rather than holding up the
	// others or growing memory. Default 100.
	WatcherBufferSize int
}

// freshnessTimeout bounds how long a read or watch at a resourceVersion newer than the
// cache waits for the cache to catch up before it fails as "too large resource version".
const freshnessTimeout = 3 * time.Second

// Cacher implements storage.Interface over Config.Storage with a watch cache.
type Cacher struct {
	cfg Config

	mu    sync.RWMutex
	fresh *sync.Cond // broadcast whenever rv advances or readiness changes
	ready bool
	rv    uint64
	// store holds the current objects by key.
	store map[string]*entry
	// index maps field → value → keys of objects with that value.
	index map[string]map[string]map[string]bool
	// ring holds the most recent events in order; it covers every change after
	// oldestRV.
	ring     []*event
	oldestRV uint64

	watchers *watcherIndex
	// backfillMu serialises backfills (see backfill).
	backfillMu sync.Mutex

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// entry is one cached object with its precomputed selector attributes.
type entry struct {
	key    string
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
}

// event is one change, with both states' attributes, as kept in the ring.
type event struct {
	typ  watch.EventType
	key  string
	rv   uint64
	cur  *entry // nil for a delete
	prev *entry // nil for an add
	// deleted is, for a delete, the last state carrying the delete's resourceVersion.
	deleted runtime.Object
}

var _ storage.Interface = (*Cacher)(nil)

// New starts a Cacher: its reflector lists and watches Config.Storage until Stop.
func New(cfg Config) (*Cacher, error) {
	if cfg.Storage == nil || cfg.NewFunc == nil || cfg.NewListFunc == nil || cfg.GetAttrs == nil || cfg.ResourcePrefix == "" {
		return nil, errors.New("cacher: Storage, NewFunc, NewListFunc, GetAttrs and ResourcePrefix are required")
	}
	if !strings.HasSuffix(cfg.ResourcePrefix, "/") {
		cfg.ResourcePrefix += "/"
	}
	if cfg.EventRingSize <= 0 {
		cfg.EventRingSize = 1000
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 5 * time.Second
	}
	if cfg.WatcherBufferSize <= 0 {
		cfg.WatcherBufferSize = 100
	}
	c := &Cacher{cfg: cfg, store: map[string]*entry{}, index: map[string]map[string]map[string]bool{}, watchers: newWatcherIndex(cfg.IndexFields)}
	c.fresh = sync.NewCond(&c.mu)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.done.Add(2)
	go func() { defer c.done.Done(); c.reflect(storage.WithWatchStream(ctx, cfg.ResourcePrefix)) }()
	go func() { defer c.done.Done(); c.sendBookmarks(ctx) }()
	return c, nil
}

// Stop ends the reflector and closes every watcher. It returns once all of the cache's
// goroutines have exited.
func (c *Cacher) Stop() {
	c.cancel()
	c.mu.Lock()
	c.fresh.Broadcast()
	c.mu.Unlock()
	c.done.Wait()
	c.mu.Lock()
	c.watchers.terminateAll()
	c.mu.Unlock()
}

// Ready reports whether the cache has completed its first list.
func (c *Cacher) Ready() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ready
}

// reflect lists the resource, then watches it from the list's revision, feeding the
// cache; on any break it relists with backoff, as client-go's reflector does.
func (c *Cacher) reflect(ctx context.Context) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	for ctx.Err() == nil {
		if err := c.listAndWatch(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("watch cache: relisting", "resource", c.cfg.ResourcePrefix, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Step()):
			}
			continue
		}
		backoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	}
}

func (c *Cacher) listAndWatch(ctx context.Context) error {
	list := c.cfg.NewListFunc()
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, storage.ListOptions{}, list); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	listRV, err := listResourceVersion(list)
	if err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	if err := c.replace(items, listRV); err != nil {
		return err
	}
	w, err := c.cfg.Storage.Watch(ctx, c.cfg.ResourcePrefix, storage.ListOptions{
		ResourceVersion: strconv.FormatUint(listRV, 10), AllowWatchBookmarks: true,
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch closed")
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				if err := c.processEvent(ev); err != nil {
					return err
				}
			case watch.Bookmark:
				rv, err := objectResourceVersion(ev.Object)
				if err != nil {
					return err
				}
				c.advance(rv)
			case watch.Error:
				return fmt.Errorf("watch error: %v", ev.Object)
			}
		}
	}
}

// replace installs a fresh list. Watchers cannot be told what changed while the cache
// was not watching, so they are closed and re-watch (getting 410 if they are too far
// behind), as kube's cacher does on a relist.
func (c *Cacher) replace(items []runtime.Object, rv uint64) error {
	store := make(map[string]*entry, len(items))
	for _, item := range items {
		e, err := c.newEntry(item)
		if err != nil {
			return err
		}
		store[e.key] = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store = store
	c.index = map[string]map[string]map[string]bool{}
	for _, e := range store {
		c.indexAdd(e)
	}
	c.ring = nil
	c.rv, c.oldestRV = rv, rv
	c.ready = true
	c.watchers.terminateAll()
	c.fresh.Broadcast()
	return nil
}

// processEvent applies one change to the store and the ring and offers it to the
// watchers it may concern.
func (c *Cacher) processEvent(ev watch.Event) error {
	cur, err := c.newEntry(ev.Object)
	if err != nil {
		return err
	}
	rv, err := objectResourceVersion(ev.Object)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &event{typ: ev.Type, key: cur.key, rv: rv, prev: c.store[cur.key]}
	if e.prev != nil {
		c.indexRemove(e.prev)
	}
	if ev.Type == watch.Deleted {
		delete(c.store, cur.key)
		e.deleted = cur.obj
		if e.prev == nil {
			e.prev = cur
		}
	} else {
		e.cur = cur
		c.store[cur.key] = cur
		c.indexAdd(cur)
		if e.prev == nil {
			e.typ = watch.Added
		} else {
			e.typ = watch.Modified
		}
	}
	if len(c.ring) >= c.cfg.EventRingSize {
		// Drop the oldest (a backfill may have left more than the capacity).
		drop := len(c.ring) - c.cfg.EventRingSize + 1
		c.oldestRV = c.ring[drop-1].rv
		c.ring = append(c.ring[:0], c.ring[drop:]...)
	}
	c.ring = append(c.ring, e)
	c.rv = rv
	c.watchers.dispatch(e)
	c.fresh.Broadcast()
	return nil
}

// advance records that every change up to rv has been seen (a progress bookmark).
func (c *Cacher) advance(rv uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv > c.rv {
		c.rv = rv
		c.fresh.Broadcast()
	}
}

func (c *Cacher) newEntry(obj runtime.Object) (*entry, error) {
	if !c.cfg.Kind.Empty() {
		obj.GetObjectKind().SetGroupVersionKind(c.cfg.Kind)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	key := c.cfg.ResourcePrefix + m.GetName()
	if ns := m.GetNamespace(); ns != "" {
		key = c.cfg.ResourcePrefix + ns + "/" + m.GetName()
	}
	l, f, err := c.cfg.GetAttrs(obj)
	if err != nil {
		return nil, err
	}
	return &entry{key: key, obj: obj, labels: l, fields: f}, nil
}

func (c *Cacher) indexAdd(e *entry) {
	for _, field := range c.cfg.IndexFields {
		byValue := c.index[field]
		if byValue == nil {
			byValue = map[string]map[string]bool{}
			c.index[field] = byValue
		}
		v := e.fields[field]
		if byValue[v] == nil {
			byValue[v] = map[string]bool{}
		}
		byValue[v][e.key] = true
	}
}

func (c *Cacher) indexRemove(e *entry) {
	for _, field := range c.cfg.IndexFields {
		delete(c.index[field][e.fields[field]], e.key)
	}
}

// waitUntilFresh blocks (with c.mu held, as sync.Cond requires) until the cache is ready
// and at least at rv, for up to freshnessTimeout. It asks the storage for a progress
// bookmark so an idle resource does not wait for its next change.
func (c *Cacher) waitUntilFresh(ctx context.Context, rv uint64) error {
	if c.ready && c.rv >= rv {
		return nil
	}
	deadline := time.Now().Add(freshnessTimeout)
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Wake the waiter when the deadline passes; ask for progress meanwhile.
	stop := context.AfterFunc(waitCtx, func() {
		c.mu.Lock()
		c.fresh.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	go c.requestProgress(storage.WithWatchStream(waitCtx, c.cfg.ResourcePrefix))
	for !(c.ready && c.rv >= rv) {
		if err := waitCtx.Err(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !c.ready {
				return fmt.Errorf("watch cache of %s is not ready: %w", c.cfg.ResourcePrefix, storage.ErrResourceVersionTooLarge)
			}
			return fmt.Errorf("watch cache of %s at %d, asked for %d: %w", c.cfg.ResourcePrefix, c.rv, rv, storage.ErrResourceVersionTooLarge)
		}
		c.fresh.Wait()
	}
	return nil
}

// requestProgress asks the storage for a progress bookmark on ctx's watch stream every
// 100 ms until ctx ends.
func (c *Cacher) requestProgress(ctx context.Context) {
	if c.cfg.RequestProgress == nil {
		return
	}
	for ctx.Err() == nil {
		_ = c.cfg.RequestProgress(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// currentRevision is etcd's current revision, read with a one-item list.
func (c *Cacher) currentRevision(ctx context.Context) (uint64, error) {
	list := c.cfg.NewListFunc()
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: 1}}, list); err != nil {
		return 0, err
	}
	return listResourceVersion(list)
}

// Create delegates to the storage.
func (c *Cacher) Create(ctx context.Context, key string, obj, out runtime.Object) error {
	return c.cfg.Storage.Create(ctx, key, obj, out)
}

// GuaranteedUpdate delegates to the storage.
func (c *Cacher) GuaranteedUpdate(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) error {
	return c.cfg.Storage.GuaranteedUpdate(ctx, key, out, preconditions, tryUpdate)
}

// Delete delegates to the storage.
func (c *Cacher) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions) error {
	return c.cfg.Storage.Delete(ctx, key, out, preconditions)
}

// Get reads from etcd for resourceVersion "" (a consistent read) and from the cache
// otherwise, waiting until the cache is at least as new as the resourceVersion asked.
func (c *Cacher) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	if opts.ResourceVersion == "" {
		return c.cfg.Storage.Get(ctx, key, opts, out)
	}
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitUntilFresh(ctx, rv); err != nil {
		return err
	}
	e, ok := c.store[key]
	if !ok {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(out)
		}
		return storage.NewKeyNotFoundError(key, int64(c.rv))
	}
	return copyInto(e.obj, out)
}

// GetList serves resourceVersion "0" and NotOlderThan reads from the cache, in key
// order and at the cache's resourceVersion, using the index when the field selector
// pins an indexed field; a limit is ignored there (the whole list, no continue token,
// as kube's cache does). Consistent reads (""), Exact reads and continuations go to
// etcd.
func (c *Cacher) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if opts.ResourceVersion == "" || opts.ResourceVersionMatch == "Exact" || opts.Predicate.Continue != "" {
		return c.cfg.Storage.GetList(ctx, key, opts, listObj)
	}
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitUntilFresh(ctx, rv); err != nil {
		return err
	}
	var items []runtime.Object
	for _, e := range c.candidates(key, opts.Predicate) {
		if matches(opts.Predicate, e) {
			items = append(items, e.obj)
		}
	}
	if err := meta.SetList(listObj, items); err != nil {
		return err
	}
	l, err := meta.ListAccessor(listObj)
	if err != nil {
		return err
	}
	l.SetResourceVersion(strconv.FormatUint(c.rv, 10))
	return nil
}

// candidates returns, in key order, the entries under key that pred can match, using
// the index when pred pins an indexed field. Called with c.mu held.
func (c *Cacher) candidates(key string, pred storage.SelectionPredicate) []*entry {
	var keys []string
	if field, value, ok := indexedValue(pred, c.cfg.IndexFields); ok {
		for k := range c.index[field][value] {
			keys = append(keys, k)
		}
	} else {
		for k := range c.store {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]*entry, 0, len(keys))
	for _, k := range keys {
		if inScope(key, k) {
			out = append(out, c.store[k])
		}
	}
	return out
}

// inScope reports whether object key k is under the watched or listed key (a
// collection ending in "/", or one object).
func inScope(key, k string) bool {
	if strings.HasSuffix(key, "/") {
		return strings.HasPrefix(k, key)
	}
	return k == key
}

// indexedValue returns the first indexed field that pred's field selector requires to
// equal one value.
func indexedValue(pred storage.SelectionPredicate, indexFields []string) (string, string, bool) {
	if pred.Field == nil {
		return "", "", false
	}
	for _, field := range indexFields {
		if value, ok := pred.Field.RequiresExactMatch(field); ok {
			return field, value, true
		}
	}
	return "", "", false
}

func matches(pred storage.SelectionPredicate, e *entry) bool {
	if e == nil {
		return false
	}
	if pred.Label != nil && !pred.Label.Matches(e.labels) {
		return false
	}
	return pred.Field == nil || pred.Field.Matches(e.fields)
}

// copyInto copies a cached object into out, a pointer to the same type.
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
