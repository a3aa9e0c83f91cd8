package cacher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// errRingMoved means the cache relisted while a backfill was running.
var errRingMoved = errors.New("watch cache relisted during backfill")

// backfill extends the ring back to revision from with etcd's history, so a client that
// resumes a watch from before the cache started (an apiserver restart) gets every event
// it missed instead of 410 and a relist. It reads the state at from, replays etcd's
// events after from up to the ring's oldest revision, and prepends them with their
// previous states, which watchers' selectors need. Returns a storage error
// (IsTooOldResourceVersion) when etcd has compacted from.
func (c *Cacher) backfill(ctx context.Context, from uint64) error {
	// One backfill at a time: after an apiserver restart every client resumes from
	// about the same revision, and the first backfill serves them all.
	c.backfillMu.Lock()
	defer c.backfillMu.Unlock()
	c.mu.RLock()
	until := c.oldestRV
	c.mu.RUnlock()
	if from >= until {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A stream of its own: etcd reports progress only on streams whose watches have all
	// caught up, and the cache's own watch sits at the newest revision.
	ctx = storage.WithWatchStream(ctx, c.cfg.ResourcePrefix+"#backfill")

	list := c.cfg.NewListFunc()
	fromRV := strconv.FormatUint(from, 10)
	if err := c.cfg.Storage.GetList(ctx, c.cfg.ResourcePrefix, storage.ListOptions{ResourceVersion: fromRV, ResourceVersionMatch: "Exact"}, list); err != nil {
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
	go c.requestProgress(ctx)
	var events []*event
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("backfill from %d: %w", from, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("backfill from %d: watch closed", from)
			}
			rv := uint64(0)
			if ev.Type != watch.Error {
				if rv, err = objectResourceVersion(ev.Object); err != nil {
					return err
				}
			}
			switch {
			case ev.Type == watch.Error:
				return fmt.Errorf("backfill from %d: %v", from, ev.Object)
			case rv > until || (ev.Type == watch.Bookmark && rv >= until):
				done = true
			case ev.Type == watch.Bookmark:
			default:
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
					state[cur.key] = cur
				}
				events = append(events, e)
			}
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.oldestRV != until {
		return errRingMoved
	}
	c.ring = append(events, c.ring...)
	c.oldestRV = from
	return nil
}
