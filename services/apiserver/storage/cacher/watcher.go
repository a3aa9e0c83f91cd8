package cacher

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// initialEventsEndAnnotation marks the bookmark that ends a WatchList's initial events
// (metav1.InitialEventsAnnotationKey).
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// Watch serves a watch from the cache (see storage.Interface.Watch):
//   - SendInitialEvents: an Added event per matching object at a state at least as new
//     as ResourceVersion ("" = etcd's current revision), then, with AllowWatchBookmarks,
//     a Bookmark annotated k8s.io/initial-events-end, then every later change;
//   - ResourceVersion "" or "0": Added events for the current state, then changes;
//   - ResourceVersion N: every change after N from the ring, then live changes; N older
//     than the ring gives one 410 Expired ERROR event.
//
// A watcher that does not keep up (its queue of WatcherBufferSize events is full) is
// closed, and its client re-watches from the last resourceVersion it saw. Mirrors
// Cacher.Watch and the cacheWatcher.
func (c *Cacher) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	sendInitial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	target := rv
	if sendInitial && opts.ResourceVersion == "" {
		// A consistent WatchList: the initial state must be at least etcd's current one.
		if target, err = c.currentRevision(ctx); err != nil {
			return nil, err
		}
	}

	c.mu.Lock()
	if err := c.waitUntilFresh(ctx, target); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if !sendInitial && rv > 0 && rv < c.oldestRV {
		// Resuming from before the cache's history (an apiserver restart): fetch the
		// missing events from etcd rather than make the client relist.
		c.mu.Unlock()
		if err := c.backfill(ctx, rv); err != nil {
			slog.Info("watch cache: cannot serve an old resourceVersion", "resource", c.cfg.ResourcePrefix, "resourceVersion", rv, "err", err)
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	w := &cacheWatcher{
		key:       key,
		pred:      opts.Predicate,
		bookmarks: opts.AllowWatchBookmarks,
		newFunc:   c.cfg.NewFunc,
		input:     make(chan *event, c.cfg.WatcherBufferSize),
		result:    make(chan watch.Event, 10),
		stopped:   make(chan struct{}),
		exited:    make(chan struct{}),
		cacher:    c,
	}
	switch {
	case sendInitial || rv == 0:
		for _, e := range c.candidates(key, opts.Predicate) {
			if matches(opts.Predicate, e) {
				w.initial = append(w.initial, watch.Event{Type: watch.Added, Object: e.obj})
			}
		}
		if sendInitial && opts.AllowWatchBookmarks {
			bookmark := w.bookmark(c.rv)
			if m, err := meta.Accessor(bookmark.Object); err == nil {
				m.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
			}
			w.initial = append(w.initial, bookmark)
		}
	case rv < c.oldestRV:
		return expiredWatch(rv, c.oldestRV), nil
	default:
		for _, e := range c.ring {
			if e.rv <= rv {
				continue
			}
			if ev, ok := w.convert(e); ok {
				w.initial = append(w.initial, ev)
			}
		}
	}
	w.indexField, w.indexValue, w.indexed = indexedValue(opts.Predicate, c.cfg.IndexFields)
	c.watchers.add(w)
	go w.run(ctx)
	return w, nil
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

// sendBookmarks offers a bookmark at the cache's resourceVersion to every watcher that
// allows them, every BookmarkInterval. A watcher too busy to take one simply misses it.
func (c *Cacher) sendBookmarks(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.BookmarkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			c.mu.Lock()
			bookmark := &event{typ: watch.Bookmark, rv: c.rv}
			for _, w := range c.watchers.all {
				if w.bookmarks {
					select {
					case w.input <- bookmark:
					default:
					}
				}
			}
			c.mu.Unlock()
		}
	}
}

// cacheWatcher is one client's watch on the cache. Mirrors cacheWatcher.
type cacheWatcher struct {
	id        int
	key       string
	pred      storage.SelectionPredicate
	bookmarks bool
	newFunc   func() runtime.Object

	indexed                bool
	indexField, indexValue string

	initial []watch.Event
	// input receives the cache's events; the cacher closes it to terminate the watcher.
	input    chan *event
	result   chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
	exited   chan struct{}
	cacher   *Cacher
}

// ResultChan implements watch.Interface.
func (w *cacheWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface; it returns once the result channel is closed.
func (w *cacheWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.cacher.mu.Lock()
		w.cacher.watchers.remove(w)
		w.cacher.mu.Unlock()
	})
	<-w.exited
}

// run delivers the initial events, then converted cache events, until the watcher is
// stopped, terminated or ctx ends.
func (w *cacheWatcher) run(ctx context.Context) {
	defer close(w.exited)
	defer close(w.result)
	send := func(ev watch.Event) bool {
		select {
		case w.result <- ev:
			return true
		case <-w.stopped:
		case <-ctx.Done():
		}
		return false
	}
	for _, ev := range w.initial {
		if !send(ev) {
			go w.Stop()
			return
		}
	}
	w.initial = nil
	for {
		select {
		case e, ok := <-w.input:
			if !ok {
				return // terminated by the cacher
			}
			if ev, ok := w.convert(e); ok && !send(ev) {
				go w.Stop()
				return
			}
		case <-w.stopped:
			return
		case <-ctx.Done():
			go w.Stop()
			return
		}
	}
}

// convert turns a cache event into what this watcher sees, applying its predicate to the
// old and the new state: starts matching → Added, keeps matching → Modified, stops
// matching → Deleted (the old object at the change's resourceVersion). Mirrors
// cacheWatcher.convertToWatchEvent.
func (w *cacheWatcher) convert(e *event) (watch.Event, bool) {
	if e.typ == watch.Bookmark {
		if !w.bookmarks {
			return watch.Event{}, false
		}
		return w.bookmark(e.rv), true
	}
	if !inScope(w.key, e.key) {
		return watch.Event{}, false
	}
	curMatch := e.cur != nil && matches(w.pred, e.cur)
	prevMatch := e.prev != nil && e.typ != watch.Added && matches(w.pred, e.prev)
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
	return watch.Event{}, false
}

// bookmark is a Bookmark event at rv: an empty object carrying only the resourceVersion.
func (w *cacheWatcher) bookmark(rv uint64) watch.Event {
	obj := w.newFunc()
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

// watcherIndex holds the watchers, those that pin an indexed field's value under it.
// Every method is called with the cacher's lock held.
type watcherIndex struct {
	nextID    int
	all       map[int]*cacheWatcher
	unindexed map[int]*cacheWatcher
	byValue   map[string]map[string]map[int]*cacheWatcher // field → value → watchers
}

func newWatcherIndex(fields []string) *watcherIndex {
	wi := &watcherIndex{all: map[int]*cacheWatcher{}, unindexed: map[int]*cacheWatcher{}, byValue: map[string]map[string]map[int]*cacheWatcher{}}
	for _, f := range fields {
		wi.byValue[f] = map[string]map[int]*cacheWatcher{}
	}
	return wi
}

func (wi *watcherIndex) add(w *cacheWatcher) {
	wi.nextID++
	w.id = wi.nextID
	wi.all[w.id] = w
	if !w.indexed {
		wi.unindexed[w.id] = w
		return
	}
	byValue := wi.byValue[w.indexField]
	if byValue[w.indexValue] == nil {
		byValue[w.indexValue] = map[int]*cacheWatcher{}
	}
	byValue[w.indexValue][w.id] = w
}

// remove forgets w; it reports whether w was still registered.
func (wi *watcherIndex) remove(w *cacheWatcher) bool {
	if _, ok := wi.all[w.id]; !ok {
		return false
	}
	delete(wi.all, w.id)
	delete(wi.unindexed, w.id)
	if w.indexed {
		delete(wi.byValue[w.indexField][w.indexValue], w.id)
		if len(wi.byValue[w.indexField][w.indexValue]) == 0 {
			delete(wi.byValue[w.indexField], w.indexValue)
		}
	}
	return true
}

// terminate closes w's input so its goroutine ends and closes the result channel.
func (wi *watcherIndex) terminate(w *cacheWatcher) {
	if wi.remove(w) {
		close(w.input)
	}
}

func (wi *watcherIndex) terminateAll() {
	for _, w := range wi.all {
		wi.terminate(w)
	}
}

// dispatch offers e to the watchers it may concern: the unindexed ones, and those
// pinned to the new or the old object's value of an indexed field. A watcher whose
// queue is full is terminated.
func (wi *watcherIndex) dispatch(e *event) {
	offer := func(w *cacheWatcher) {
		select {
		case w.input <- e:
		default:
			wi.terminate(w)
		}
	}
	for _, w := range wi.unindexed {
		offer(w)
	}
	for field, byValue := range wi.byValue {
		var curValue string
		if e.cur != nil {
			curValue = e.cur.fields[field]
			for _, w := range byValue[curValue] {
				offer(w)
			}
		}
		if e.prev != nil {
			if prevValue := e.prev.fields[field]; e.cur == nil || prevValue != curValue {
				for _, w := range byValue[prevValue] {
					offer(w)
				}
			}
		}
	}
}
