package cacher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// backfillTimeout bounds one backfill: its list, its watch and its wait for progress.
const backfillTimeout = 10 * time.Second

// maxBackfillFactor caps a backfill at this many times Config.EventRingSize events; a
// resume from further back gets 410 and relists, which is then cheaper.
const maxBackfillFactor = 10

var (
	// errRingMoved means the cache relisted while a backfill was running.
	errRingMoved = errors.New("watch cache relisted during backfill")
	// errBackfillTooLong means the history to replay exceeds the backfill cap.
	errBackfillTooLong = errors.New("too many events to replay")
)

// backfill extends the ring back to revision from with etcd's history, so that a client
// resuming a watch from before the cache's ring (typically across an apiserver restart,
// when the cache starts at a fresh list) gets every event it missed instead of 410 and
// a relist. kube's cacher answers 410 there; this is skiff's addition. It reads the
// state at from (an Exact list), replays etcd's events after from up to the ring's
// oldest revision to rebuild each event's previous state (which watchers' selectors
// need), and prepends them to the ring. Returns a storage error (IsTooOldResourceVersion)
// when etcd has compacted from, errBackfillTooLong beyond the cap, or the list's or
// watch's error.
func (c *Cacher) backfill(ctx context.Context, from uint64) error {
	// One backfill at a time: after an apiserver restart every client resumes from
	// about the same revision, and the first backfill serves them all.
	c.backfillMu.Lock()
	defer c.backfillMu.Unlock()
	c.mu.RLock()
	until := c.ring.oldestRV
	c.mu.RUnlock()
	if from >= until {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, backfillTimeout)
	defer cancel()
	// A stream of its own: etcd reports progress only on streams whose watches have all
	// caught up, and the cache's own watch must not wait for this one.
	ctx = storage.WithWatchStream(ctx, c.cfg.ResourcePrefix+"#backfill")

	list := c.cfg.NewListFunc()
	fromRV := strconv.FormatUint(from, 10)
	opts := storage.ListOptions{ResourceVersion: fromRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, opts, list); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	state := make(map[string]*entry, len(items))
	for _, item := range items {
		e, err := c.newEntry(item)
		if err != nil {
			return err
		}
		state[e.key] = e
	}

	w, err := c.cfg.Storage.Watch(ctx, c.cfg.ResourcePrefix, storage.ListOptions{ResourceVersion: fromRV, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer w.Stop()
	progress := newProgressRequester(c.requestProgress)
	progress.setWatching(true)
	defer progress.setWatching(false) // before Stop: no progress request outlives the watch
	progressCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go progress.run(progressCtx)
	defer progress.want()()

	var events []*event
	for done := false; !done; {
		var ev watch.Event
		select {
		case <-ctx.Done():
			return fmt.Errorf("backfill from %d: %w", from, ctx.Err())
		case <-c.stopCh:
			return fmt.Errorf("backfill from %d: %w", from, errStopped)
		case got, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("backfill from %d: watch closed", from)
			}
			ev = got
		}
		if ev.Type == watch.Error {
			return fmt.Errorf("backfill from %d: %v", from, ev.Object)
		}
		rv, err := objectResourceVersion(ev.Object)
		if err != nil {
			return err
		}
		switch {
		case rv > until || (ev.Type == watch.Bookmark && rv >= until):
			done = true
		case ev.Type == watch.Bookmark:
		default:
			if len(events) >= maxBackfillFactor*c.cfg.EventRingSize {
				return fmt.Errorf("backfill from %d: %w", from, errBackfillTooLong)
			}
			cur, err := c.newEntry(ev.Object)
			if err != nil {
				return err
			}
			e := &event{typ: ev.Type, key: cur.key, rv: rv, prev: state[cur.key]}
			if ev.Type == watch.Deleted {
				e.deleted = cur.obj
				if e.prev == nil {
					e.prev = cur
				}
				delete(state, cur.key)
			} else {
				e.cur = cur
				e.typ = watch.Modified
				if e.prev == nil {
					e.typ = watch.Added
				}
				state[cur.key] = cur
			}
			events = append(events, e)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring.oldestRV != until {
		return errRingMoved
	}
	c.ring.prepend(events, from)
	return nil
}
