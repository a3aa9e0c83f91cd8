package cacher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// errExpired means etcd has compacted the revision the cache wanted to watch from, so
// the cache must relist.
var errExpired = errors.New("watch expired")

// newBackoff is the reflector's retry backoff: 100 ms doubling up to 5 s, with jitter.
func newBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
}

// reflect keeps the cache in step with Storage until ctx ends, as client-go's reflector
// does for an informer: list, then watch from the list's revision. When the watch
// breaks (etcd restarted, a leader lost, the stream closed) it watches again from the
// cache's revision, so watchers notice nothing; only when etcd has compacted that
// revision (410) does it list again. Failures are retried with backoff.
func (c *Cacher) reflect(ctx context.Context) {
	backoff := newBackoff()
	needList := true
	for ctx.Err() == nil {
		var err error
		progressed := false
		if needList {
			err = c.listAndReplace(ctx)
			progressed = err == nil
		}
		if err == nil {
			needList = false
			var watched bool
			watched, err = c.watch(ctx)
			progressed = progressed || watched
			if errors.Is(err, errExpired) {
				needList = true
			}
		}
		if ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = newBackoff()
		}
		delay := backoff.Step()
		slog.Warn("watch cache: retrying", "resource", c.cfg.ResourcePrefix, "relist", needList, "in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// listAndReplace reads the whole resource from Storage (a consistent list) and installs
// it as the cache's state.
func (c *Cacher) listAndReplace(ctx context.Context) error {
	list := c.cfg.NewListFunc()
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, storage.ListOptions{}, list); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	rv, err := listResourceVersion(list)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	entries := make([]*entry, 0, len(items))
	for _, item := range items {
		e, err := c.newEntry(item)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		entries = append(entries, e)
	}
	c.replace(newObjectStore(c.cfg.IndexFields, entries), rv)
	return nil
}

// replace installs a freshly listed state at revision rv. Watchers cannot be told what
// changed while the cache was not watching, so they are closed and re-watch from their
// last resourceVersion, as kube's cacher terminates all watchers when it relists.
func (c *Cacher) replace(objects *objectStore, rv uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects = objects
	c.ring = newEventRing(c.cfg.EventRingSize, rv)
	c.rv = rv
	c.ready = true
	c.watchersMu.Lock()
	c.watchers.terminateAll()
	c.watchersMu.Unlock()
	c.signalAdvanced()
}

// signalAdvanced wakes everyone waiting for the cache to advance. Called with c.mu held.
func (c *Cacher) signalAdvanced() {
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// watch follows Storage's watch from the cache's revision, applying and dispatching
// each change, and sends periodic bookmarks, until the watch ends. It returns errExpired
// when etcd has compacted the cache's revision; watched reports whether the watch got
// as far as delivering anything.
func (c *Cacher) watch(ctx context.Context) (watched bool, err error) {
	c.mu.RLock()
	from := c.rv
	c.mu.RUnlock()
	w, err := c.cfg.Storage.Watch(ctx, c.cfg.ResourcePrefix, storage.ListOptions{
		ResourceVersion: strconv.FormatUint(from, 10), AllowWatchBookmarks: true,
	})
	if err != nil {
		return false, fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	c.progress.setWatching(true)
	defer c.progress.setWatching(false) // before Stop: no progress request outlives the watch
	ticker := time.NewTicker(c.cfg.BookmarkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return watched, nil
		case <-ticker.C:
			c.mu.RLock()
			rv := c.rv
			c.mu.RUnlock()
			c.dispatchBookmark(rv)
			// Ask for progress too: if etcd has moved on, the notification advances
			// the cache and every bookmark-allowing watcher hears of it at once.
			if c.requestProgress != nil {
				reqCtx, cancel := context.WithTimeout(ctx, time.Second)
				_ = c.requestProgress(reqCtx)
				cancel()
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return watched, errors.New("watch: closed")
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				e, err := c.apply(ev)
				if err != nil {
					return watched, fmt.Errorf("watch: %w", err)
				}
				watched = true
				c.dispatch(e)
			case watch.Bookmark:
				rv, err := objectResourceVersion(ev.Object)
				if err != nil {
					return watched, fmt.Errorf("watch: bookmark: %w", err)
				}
				watched = true
				if c.advance(rv) {
					c.dispatchBookmark(rv)
				}
			case watch.Error:
				if status, ok := ev.Object.(*metav1.Status); ok && (status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired) {
					return watched, fmt.Errorf("%w: %s", errExpired, status.Message)
				}
				return watched, fmt.Errorf("watch: %v", ev.Object)
			}
		}
	}
}

// apply records one change in the store and the ring and returns it as a cache event.
// Mirrors watchCache.processEvent.
func (c *Cacher) apply(ev watch.Event) (*event, error) {
	cur, err := c.newEntry(ev.Object)
	if err != nil {
		return nil, err
	}
	rv, err := objectResourceVersion(ev.Object)
	if err != nil {
		return nil, err
	}
	e := &event{typ: ev.Type, key: cur.key, rv: rv}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Type == watch.Deleted {
		e.prev, e.deleted = c.objects.remove(cur.key), cur.obj
		if e.prev == nil {
			e.prev = cur
		}
	} else {
		e.cur, e.prev = cur, c.objects.put(cur)
		e.typ = watch.Modified
		if e.prev == nil {
			e.typ = watch.Added
		}
	}
	c.ring.add(e)
	c.rv = rv
	c.signalAdvanced()
	return e, nil
}

// advance records that every change up to rv has been seen (a progress notification);
// it reports whether the cache's revision moved.
func (c *Cacher) advance(rv uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv <= c.rv {
		return false
	}
	c.rv = rv
	c.signalAdvanced()
	return true
}

// newEntry wraps a decoded object for the cache: stamps its kind, computes its key and
// its selector attributes.
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
