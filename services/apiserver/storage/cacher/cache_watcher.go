package cacher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"skiff.dev/services/apiserver/storage"
)

// initialEventsEndAnnotation marks the bookmark that ends a WatchList's initial events
// (metav1.InitialEventsAnnotationKey).
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// resultBufferSize is the capacity of a watcher's result channel; the backlog proper is
// its input queue (Config.WatcherBufferSize).
const resultBufferSize = 10

// errStopped is returned by Watch once Stop has begun.
var errStopped = errors.New("watch cache is stopped")

// Watch implements storage.Interface.Watch from the cache; key is one object or a
// collection ending in "/". Where the watch starts:
//   - opts.SendInitialEvents true (WatchList): a watch.Added for every matching object
//     in the cache once the cache is at least at ResourceVersion ("" = etcd's current
//     revision, a consistent start; "0" = the cache as it is), then, with
//     AllowWatchBookmarks, a Bookmark at the cache's revision annotated
//     "k8s.io/initial-events-end": "true", then every later change;
//   - opts.SendInitialEvents false with ResourceVersion "" or "0": every change from the
//     cache's current revision on, without initial events;
//   - ResourceVersion "" or "0": the Added events as above, without the bookmark;
//   - ResourceVersion N: every change after N, from the ring, then live changes. N older
//     than the ring is first replayed from etcd's history (see backfill); if etcd has
//     compacted it too, the watch sends one ERROR event carrying a 410 Expired
//     metav1.Status ("too old resource version: N (oldest)") and closes.
//
// A start newer than the cache, or a watch that arrives before the cache's first list,
// waits up to 3 s for the cache to catch up, then fails with an error wrapping
// storage.ErrResourceVersionTooLarge. Returns storage.ErrInvalidResourceVersion for a
// malformed resourceVersion and an error once Stop has begun.
//
// Each watcher sees an object that starts matching its selectors as Added, one that
// stops matching as Deleted (the old state, at the change's resourceVersion), as
// cacheWatcher.convertToWatchEvent does. With AllowWatchBookmarks it also gets a
// Bookmark every Config.BookmarkInterval and whenever etcd reports progress. A watcher
// whose queue stays full beyond the dispatch budget is closed; its client re-watches
// from the last resourceVersion it saw. The watch ends, closing the result channel, when
// ctx ends, Stop is called on it, or the cache stops or relists. Mirrors Cacher.Watch.
func (c *Cacher) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	initialEvents := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	fromNow := opts.SendInitialEvents != nil && !*opts.SendInitialEvents && rv == 0
	legacyInitial := opts.SendInitialEvents == nil && rv == 0
	target := rv
	if initialEvents && opts.ResourceVersion == "" {
		// A consistent WatchList: the initial state must be at least etcd's current one.
		if target, err = c.currentRevision(ctx); err != nil {
			return nil, fmt.Errorf("watch %s: %w", key, err)
		}
	}

	for backfilled := false; ; backfilled = true {
		if err := c.waitUntilFreshAndRLock(ctx, target); err != nil {
			return nil, fmt.Errorf("watch %s: %w", key, err)
		}
		if initialEvents || fromNow || legacyInitial || rv >= c.ring.oldestRV {
			break
		}
		oldest := c.ring.oldestRV
		c.mu.RUnlock()
		if backfilled {
			// The ring moved past rv again while the backfill was being installed.
			return expiredWatch(rv, oldest), nil
		}
		// Resuming from before the ring (e.g. across an apiserver restart): fetch the
		// missing events from etcd rather than make the client relist.
		if err := c.backfill(ctx, rv); err != nil {
			slog.Info("watch cache: cannot replay an old resourceVersion", "resource", c.cfg.ResourcePrefix, "resourceVersion", rv, "err", err)
			return expiredWatch(rv, oldest), nil
		}
	}
	defer c.mu.RUnlock()

	w := &cacheWatcher{
		cacher:    c,
		key:       key,
		pred:      opts.Predicate,
		index:     indexedValue(opts.Predicate, c.cfg.IndexFields),
		bookmarks: opts.AllowWatchBookmarks,
		startRV:   c.rv,
		result:    make(chan watch.Event, resultBufferSize),
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
	}
	var initial []watch.Event
	var replay []*event
	switch {
	case initialEvents || legacyInitial:
		for _, e := range c.objects.list(scopePrefix(key), w.index) {
			if inScope(key, e.key) && e.matches(opts.Predicate) {
				initial = append(initial, watch.Event{Type: watch.Added, Object: e.obj})
			}
		}
		if initialEvents && opts.AllowWatchBookmarks {
			bookmark := c.bookmark(c.rv)
			if m, err := meta.Accessor(bookmark.Object); err == nil {
				m.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
			}
			initial = append(initial, bookmark)
		}
	case !fromNow:
		replay, _ = c.ring.since(rv)
	}
	// Room for the live events that arrive while the initial ones are being sent.
	w.input = make(chan *event, c.cfg.WatcherBufferSize+len(initial)+len(replay))

	c.watchersMu.Lock()
	defer c.watchersMu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("watch %s: %w", key, errStopped)
	}
	c.watchers.add(w)
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		w.run(ctx, initial, replay)
	}()
	return w, nil
}

// scopePrefix is the collection a watch's key lies in: the key itself for a collection,
// its parent for one object.
func scopePrefix(key string) string {
	if i := len(key) - 1; i >= 0 && key[i] != '/' {
		for i >= 0 && key[i] != '/' {
			i--
		}
		return key[:i+1]
	}
	return key
}

// expiredWatch is a watch that only reports 410 Expired and ends, as kube-apiserver
// answers a watch from a resourceVersion its cache no longer covers.
func expiredWatch(rv, oldest uint64) watch.Interface {
	ch := make(chan watch.Event, 1)
	status := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, oldest)).ErrStatus
	ch <- watch.Event{Type: watch.Error, Object: &status}
	close(ch)
	return watch.NewProxyWatcher(ch)
}

// bookmark is a Bookmark event at rv: a new empty object carrying only the
// resourceVersion (and the resource's kind).
func (c *Cacher) bookmark(rv uint64) watch.Event {
	obj := c.cfg.NewFunc()
	if !c.cfg.Kind.Empty() {
		obj.GetObjectKind().SetGroupVersionKind(c.cfg.Kind)
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

// cacheWatcher is one client's watch on the cache: the dispatcher queues events on
// input, and the watcher's goroutine converts them for its selector and sends them on
// result. Mirrors cacheWatcher.
type cacheWatcher struct {
	cacher    *Cacher
	id        int
	key       string
	pred      storage.SelectionPredicate
	index     indexValue // the indexed value the watcher is registered under, if any
	bookmarks bool
	// startRV is the cache's revision when the watcher started: its initial or
	// replayed events cover every change up to it, so the dispatcher skips older ones.
	startRV uint64

	input    chan *event
	result   chan watch.Event
	done     chan struct{} // closed when the watcher must end
	doneOnce sync.Once
	exited   chan struct{} // closed when run has returned and result is closed
}

// ResultChan implements watch.Interface.
func (w *cacheWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface; it returns once the result channel is closed.
func (w *cacheWatcher) Stop() {
	w.cacher.forget(w)
	<-w.exited
}

// end makes the watcher's goroutine return; safe to call more than once.
func (w *cacheWatcher) end() { w.doneOnce.Do(func() { close(w.done) }) }

// run sends the initial events, then the replayed ones, then live ones, each converted
// for the watcher, until the watcher ends or ctx does.
func (w *cacheWatcher) run(ctx context.Context, initial []watch.Event, replay []*event) {
	defer close(w.exited)
	defer close(w.result)
	defer w.cacher.forget(w)
	send := func(ev watch.Event) bool {
		select {
		case w.result <- ev:
			return true
		case <-w.done:
		case <-ctx.Done():
		}
		return false
	}
	for _, ev := range initial {
		if !send(ev) {
			return
		}
	}
	for _, e := range replay {
		if ev, ok := w.convert(e); ok && !send(ev) {
			return
		}
	}
	// The initial (or replayed) events are queued for the client: as kube's
	// cacheWatcher, the watch's initialization is done for API Priority and Fairness,
	// which frees the seat it was admitted with.
	utilflowcontrol.WatchInitialized(ctx)
	for {
		select {
		case e := <-w.input:
			if ev, ok := w.convert(e); ok && !send(ev) {
				return
			}
		case <-w.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// convert turns a cache event into what this watcher sees, applying its selectors to
// the old and the new state: starts matching → Added, keeps matching → Modified, stops
// matching → Deleted (the old object at the change's resourceVersion). ok is false when
// the watcher sees nothing of e. Mirrors cacheWatcher.convertToWatchEvent.
func (w *cacheWatcher) convert(e *event) (ev watch.Event, ok bool) {
	if e.typ == watch.Bookmark {
		return w.cacher.bookmark(e.rv), w.bookmarks
	}
	if !inScope(w.key, e.key) {
		return ev, false
	}
	curMatch := e.cur != nil && e.cur.matches(w.pred)
	prevMatch := e.prev != nil && e.typ != watch.Added && e.prev.matches(w.pred)
	switch {
	case curMatch && prevMatch:
		return watch.Event{Type: watch.Modified, Object: e.cur.obj}, true
	case curMatch:
		return watch.Event{Type: watch.Added, Object: e.cur.obj}, true
	case prevMatch && e.typ == watch.Deleted:
		return watch.Event{Type: watch.Deleted, Object: e.deleted}, true
	case prevMatch:
		old := e.prev.obj.DeepCopyObject()
		if m, err := meta.Accessor(old); err == nil {
			m.SetResourceVersion(strconv.FormatUint(e.rv, 10))
		}
		return watch.Event{Type: watch.Deleted, Object: old}, true
	}
	return ev, false
}

// forget unregisters w and makes its goroutine end.
func (c *Cacher) forget(w *cacheWatcher) {
	c.watchersMu.Lock()
	c.watchers.remove(w)
	c.watchersMu.Unlock()
	w.end()
}

// watcherIndex holds the registered watchers: those pinned to one value of an indexed
// field under that value, the others apart. Mirrors cacher's indexedWatchers. Every
// method is called with Cacher.watchersMu held.
type watcherIndex struct {
	nextID    int
	all       map[int]*cacheWatcher
	unindexed map[int]*cacheWatcher
	byValue   map[string]map[string]map[int]*cacheWatcher // field → value → id → watcher
}

func newWatcherIndex() *watcherIndex {
	return &watcherIndex{all: map[int]*cacheWatcher{}, unindexed: map[int]*cacheWatcher{},
		byValue: map[string]map[string]map[int]*cacheWatcher{}}
}

func (wi *watcherIndex) add(w *cacheWatcher) {
	wi.nextID++
	w.id = wi.nextID
	wi.all[w.id] = w
	if !w.index.ok {
		wi.unindexed[w.id] = w
		return
	}
	byValue := wi.byValue[w.index.field]
	if byValue == nil {
		byValue = map[string]map[int]*cacheWatcher{}
		wi.byValue[w.index.field] = byValue
	}
	if byValue[w.index.value] == nil {
		byValue[w.index.value] = map[int]*cacheWatcher{}
	}
	byValue[w.index.value][w.id] = w
}

func (wi *watcherIndex) remove(w *cacheWatcher) {
	if wi.all[w.id] != w {
		return
	}
	delete(wi.all, w.id)
	delete(wi.unindexed, w.id)
	if w.index.ok {
		byValue := wi.byValue[w.index.field]
		delete(byValue[w.index.value], w.id)
		if len(byValue[w.index.value]) == 0 {
			delete(byValue, w.index.value)
		}
	}
}

// terminate unregisters w and ends it.
func (wi *watcherIndex) terminate(w *cacheWatcher) {
	wi.remove(w)
	w.end()
}

func (wi *watcherIndex) terminateAll() {
	for _, w := range wi.all {
		wi.terminate(w)
	}
}

// targets appends to buf the watchers e may concern: the unindexed ones and those
// pinned to the old or the new object's value of their indexed field.
func (wi *watcherIndex) targets(e *event, buf []*cacheWatcher) []*cacheWatcher {
	for _, w := range wi.unindexed {
		buf = append(buf, w)
	}
	for field, byValue := range wi.byValue {
		var curValue string
		if e.cur != nil {
			curValue = e.cur.fields[field]
			for _, w := range byValue[curValue] {
				buf = append(buf, w)
			}
		}
		if e.prev != nil {
			if prevValue := e.prev.fields[field]; e.cur == nil || prevValue != curValue {
				for _, w := range byValue[prevValue] {
					buf = append(buf, w)
				}
			}
		}
	}
	return buf
}

// dispatch queues e for every watcher it may concern, without holding the cache's lock.
// A watcher with a full queue is waited for, all of them together, for as long as the
// dispatch budget allows; those still full then are terminated. Called only from the
// reflector goroutine, in revision order. Mirrors Cacher.dispatchEvent.
func (c *Cacher) dispatch(e *event) {
	c.watchersMu.Lock()
	targets := c.watchers.targets(e, c.targetsBuf[:0])
	c.watchersMu.Unlock()

	blocked := c.blockedBuf[:0]
	for _, w := range targets {
		if e.rv > w.startRV && !w.tryAdd(e) {
			blocked = append(blocked, w)
		}
	}
	if len(blocked) > 0 {
		budget := c.budget.take()
		start := time.Now()
		timer := time.NewTimer(budget)
		expired := false
		for _, w := range blocked {
			if !expired && w.addBefore(e, timer.C) {
				continue
			}
			expired = true
			if !w.tryAdd(e) {
				slog.Info("watch cache: closing a watcher that does not keep up", "resource", c.cfg.ResourcePrefix, "key", w.key, "queue", cap(w.input))
				c.forget(w)
			}
		}
		timer.Stop()
		c.budget.giveBack(budget - time.Since(start))
	}
	clear(targets)
	clear(blocked)
	c.targetsBuf, c.blockedBuf = targets[:0], blocked[:0]
}

// dispatchBookmark offers a bookmark at rv to every watcher that allows them; one with
// a full queue simply misses it. Called only from the reflector goroutine, so a bookmark
// never overtakes an event at or before rv.
func (c *Cacher) dispatchBookmark(rv uint64) {
	e := &event{typ: watch.Bookmark, rv: rv}
	c.watchersMu.Lock()
	defer c.watchersMu.Unlock()
	for _, w := range c.watchers.all {
		if w.bookmarks && rv >= w.startRV {
			w.tryAdd(e)
		}
	}
}

// tryAdd queues e without waiting; it reports false when the queue is full.
func (w *cacheWatcher) tryAdd(e *event) bool {
	select {
	case w.input <- e:
		return true
	case <-w.done:
		return true // the watcher is gone; nothing to wait for
	default:
		return false
	}
}

// addBefore queues e, waiting until expire fires; it reports false if it did.
func (w *cacheWatcher) addBefore(e *event, expire <-chan time.Time) bool {
	select {
	case w.input <- e:
		return true
	case <-w.done:
		return true
	case <-expire:
		return false
	}
}

// timeBudget is how long dispatching may still wait for slow watchers: at most
// maxDispatchBudget, refilled at dispatchBudgetRefill per second, so a burst of slow
// watchers costs the dispatcher at most about 100 ms, then 50 ms per second. Mirrors
// cacher's timeBudget.
type timeBudget struct {
	available time.Duration
	refilled  time.Time
}

const (
	maxDispatchBudget    = 100 * time.Millisecond
	dispatchBudgetRefill = 50 * time.Millisecond // per second
)

func newTimeBudget() timeBudget {
	return timeBudget{available: maxDispatchBudget, refilled: time.Now()}
}

// take returns the whole available budget, which the caller gives back unused.
func (b *timeBudget) take() time.Duration {
	now := time.Now()
	b.available += time.Duration(float64(dispatchBudgetRefill) * now.Sub(b.refilled).Seconds())
	b.available = min(b.available, maxDispatchBudget)
	b.refilled = now
	taken := b.available
	b.available = 0
	return taken
}

// giveBack returns the unused part of a taken budget.
func (b *timeBudget) giveBack(unused time.Duration) {
	b.available = min(b.available+max(unused, 0), maxDispatchBudget)
}
