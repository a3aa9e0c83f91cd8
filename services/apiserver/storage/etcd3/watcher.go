package etcd3

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"skiff.dev/services/apiserver/storage"
)

// watchBufferSize is how many events a watcher holds for a slow consumer before it stops
// reading from etcd (etcd then buffers on its side). Kubernetes' etcd3 watcher uses 100.
const watchBufferSize = 100

// initialEventsEndAnnotation marks the bookmark that ends a WatchList's initial events
// (metav1.InitialEventsAnnotationKey).
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// Watch implements storage.Interface.Watch, mirroring Kubernetes' etcd3 watcher
// (watcher.go). key is one object, or a collection when it ends in "/".
//
// Where the watch starts:
//   - opts.SendInitialEvents true (WatchList): one read of the latest state, which must be
//     at least opts.ResourceVersion (else one 504 "Too large resource version" ERROR
//     event), a synthetic watch.Added per match in key order, then, with
//     AllowWatchBookmarks, a Bookmark at the read's revision annotated
//     "k8s.io/initial-events-end": "true", then every change after the read;
//   - opts.SendInitialEvents false and ResourceVersion "" or "0": every change from now
//     on, no initial events (Kubernetes' "start at any resourceVersion");
//   - ResourceVersion "" or "0": the initial Added events as above, no bookmark, then
//     every change after the read;
//   - any other revision R: every change after R (an etcd watch from R+1 with
//     WithPrevKV).
//
// With opts.Predicate, an object that starts matching arrives as Added, one that stops
// matching as Deleted carrying its last matching state with the resourceVersion of the
// change. A Deleted event's resourceVersion is the delete's. With
// opts.AllowWatchBookmarks the etcd watch asks for progress notifications
// (clientv3.WithProgressNotify, and RequestProgress on demand) and each one arrives as a
// watch.Bookmark whose object is empty but for resourceVersion = etcd's revision: every
// change up to it has been sent.
//
// The watch requires an etcd leader (clientv3.WithRequireLeader), so a member cut off
// from its cluster ends the watch instead of going silent. Errors end the watch with
// one watch.Error event whose object is a *metav1.Status: 410 Expired ("too old
// resource version: R (C)") when R is compacted, 500 InternalError otherwise (decode
// failure, lost leader, etcd gone). The result channel (capacity 100) is closed when the
// watch ends: after an error, when ctx is done, or when Stop is called. Stop returns once
// the watcher's goroutine has exited.
//
// Returns storage.ErrInvalidResourceVersion (400) for a malformed opts.ResourceVersion.
func (s *Store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	rev, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	start := startFrom{rev: rev}
	switch {
	case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
		start = startFrom{minRev: rev, initialEvents: true, endBookmark: opts.AllowWatchBookmarks}
	case opts.SendInitialEvents != nil && rev == 0:
		start = startFrom{now: true}
	case rev == 0:
		start = startFrom{initialEvents: true}
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{
		store:     s,
		key:       key,
		recursive: strings.HasSuffix(key, "/"),
		bookmarks: opts.AllowWatchBookmarks,
		pred:      opts.Predicate,
		result:    make(chan watch.Event, watchBufferSize),
		cancel:    cancel,
		done:      make(chan struct{}),
	}
	go w.run(ctx, start)
	// Whether the watch has caught up is not known here: as kube's etcd3 watcher, it
	// tells API Priority and Fairness at once that its initialization is done, so the
	// seat it was admitted with is freed.
	utilflowcontrol.WatchInitialized(ctx)
	return w, nil
}

// startFrom says where a watch starts: after revision rev, from now, or with the initial
// state (read at a revision not older than minRev, optionally ended by a bookmark).
type startFrom struct {
	rev           int64
	now           bool
	initialEvents bool
	minRev        int64
	endBookmark   bool
}

// watcher is one running Watch: a goroutine that turns etcd watch responses into
// watch.Events on result. It mirrors Kubernetes' etcd3 watchChan.
type watcher struct {
	store     *Store
	key       string
	recursive bool
	bookmarks bool
	pred      storage.SelectionPredicate
	result    chan watch.Event
	cancel    context.CancelFunc
	done      chan struct{}
}

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface: it ends the watch, and returns once the result
// channel is closed and the etcd watch released. Safe to call more than once.
func (w *watcher) Stop() {
	w.cancel()
	<-w.done
}

// run sends the initial state if asked, then the etcd watch after it, until ctx is done
// or an error ends the watch.
func (w *watcher) run(ctx context.Context, start startFrom) {
	defer close(w.done)
	defer close(w.result)
	defer w.cancel()

	rev := start.rev
	if start.initialEvents {
		var ok bool
		if rev, ok = w.sendInitialState(ctx, start.minRev); !ok {
			return
		}
		if start.endBookmark {
			bookmark := w.bookmark(rev)
			if m, err := meta.Accessor(bookmark.Object); err == nil {
				m.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
			}
			if !w.send(ctx, bookmark) {
				return
			}
		}
	}

	opts := []clientv3.OpOption{clientv3.WithPrevKV()}
	if !start.now {
		opts = append(opts, clientv3.WithRev(rev+1))
	}
	if w.recursive {
		opts = append(opts, clientv3.WithPrefix())
	}
	if w.bookmarks {
		opts = append(opts, clientv3.WithProgressNotify())
	}
	wch := w.store.watcher.Watch(streamContext(ctx), w.key, opts...)
	for {
		select {
		case <-ctx.Done():
			return
		case resp, open := <-wch:
			if !open {
				if ctx.Err() == nil {
					w.sendInternalError(ctx, fmt.Errorf("watch %s: etcd closed the watch", w.key))
				}
				return
			}
			if resp.CompactRevision != 0 {
				status := apierrors.NewResourceExpired(fmt.Sprintf(
					"too old resource version: %d (%d)", rev, resp.CompactRevision)).ErrStatus
				w.send(ctx, watch.Event{Type: watch.Error, Object: &status})
				return
			}
			if err := resp.Err(); err != nil {
				w.sendInternalError(ctx, fmt.Errorf("watch %s: %w", w.key, err))
				return
			}
			if resp.IsProgressNotify() {
				// etcd promises every change up to this revision has been sent.
				if w.bookmarks && !w.send(ctx, w.bookmark(resp.Header.Revision)) {
					return
				}
				continue
			}
			for _, ev := range resp.Events {
				event, ok, err := w.transform(ev)
				if err != nil {
					w.sendInternalError(ctx, fmt.Errorf("watch %s: %w", w.key, err))
					return
				}
				if ok && !w.send(ctx, event) {
					return
				}
			}
		}
	}
}

// sendInitialState sends a synthetic Added for every current match and returns the
// revision it read at; ok is false when the watch must end. A read older than minRev
// (a revision etcd has not reached) ends the watch with a 504 "Too large resource
// version" error, as Kubernetes' storage.NewTooLargeResourceVersionError.
func (w *watcher) sendInitialState(ctx context.Context, minRev int64) (rev int64, ok bool) {
	var opts []clientv3.OpOption
	if w.recursive {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := w.store.kv.Get(ctx, w.key, opts...)
	if err != nil {
		if ctx.Err() == nil {
			w.sendInternalError(ctx, fmt.Errorf("watch %s: initial read: %w", w.key, err))
		}
		return 0, false
	}
	if minRev > resp.Header.Revision {
		status := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", minRev, resp.Header.Revision), 1).ErrStatus
		status.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
		w.send(ctx, watch.Event{Type: watch.Error, Object: &status})
		return 0, false
	}
	for _, kv := range resp.Kvs {
		obj, err := w.store.decodeNew(kv.Value, kv.ModRevision)
		if err != nil {
			w.sendInternalError(ctx, fmt.Errorf("watch %s: %w", w.key, err))
			return 0, false
		}
		match, err := w.pred.Matches(obj)
		if err != nil {
			w.sendInternalError(ctx, fmt.Errorf("watch %s: match %s: %w", w.key, kv.Key, err))
			return 0, false
		}
		if match && !w.send(ctx, watch.Event{Type: watch.Added, Object: obj}) {
			return 0, false
		}
	}
	return resp.Header.Revision, true
}

// transform turns one etcd event into the watch event the predicate calls for; ok is
// false when the event concerns no matching object. Mirrors watchChan.transform.
func (w *watcher) transform(ev *clientv3.Event) (event watch.Event, ok bool, err error) {
	rev := ev.Kv.ModRevision
	if ev.Type == clientv3.EventTypeDelete {
		if ev.PrevKv == nil {
			return event, false, fmt.Errorf("delete of %s at revision %d has no previous value", ev.Kv.Key, rev)
		}
		old, match, err := w.decodeAndMatch(ev.PrevKv.Value, rev)
		if err != nil || !match {
			return event, false, err
		}
		return watch.Event{Type: watch.Deleted, Object: old}, true, nil
	}

	cur, curMatch, err := w.decodeAndMatch(ev.Kv.Value, rev)
	if err != nil {
		return event, false, err
	}
	if ev.IsCreate() || w.pred.Empty() {
		// Nothing was visible before a create, and without a predicate an object
		// cannot move in or out of view: no need to decode the previous state.
		evType := watch.Modified
		if ev.IsCreate() {
			evType = watch.Added
		}
		return watch.Event{Type: evType, Object: cur}, curMatch, nil
	}
	var old runtime.Object
	prevMatch := false
	if ev.PrevKv != nil {
		if old, prevMatch, err = w.decodeAndMatch(ev.PrevKv.Value, rev); err != nil {
			return event, false, err
		}
	}
	switch {
	case curMatch && prevMatch:
		return watch.Event{Type: watch.Modified, Object: cur}, true, nil
	case curMatch:
		return watch.Event{Type: watch.Added, Object: cur}, true, nil
	case prevMatch:
		return watch.Event{Type: watch.Deleted, Object: old}, true, nil
	default:
		return event, false, nil
	}
}

// decodeAndMatch decodes a stored value with resourceVersion rev and applies the predicate.
func (w *watcher) decodeAndMatch(data []byte, rev int64) (runtime.Object, bool, error) {
	obj, err := w.store.decodeNew(data, rev)
	if err != nil {
		return nil, false, err
	}
	match, err := w.pred.Matches(obj)
	if err != nil {
		return nil, false, fmt.Errorf("match: %w", err)
	}
	return obj, match, nil
}

// send delivers ev unless the watch is ending; it reports whether ev was delivered.
func (w *watcher) send(ctx context.Context, ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendInternalError delivers err as a watch.Error event with a 500 InternalError Status.
func (w *watcher) sendInternalError(ctx context.Context, err error) {
	status := apierrors.NewInternalError(err).ErrStatus
	w.send(ctx, watch.Event{Type: watch.Error, Object: &status})
}

// bookmark is a Bookmark event at rev: an empty object carrying only the resourceVersion.
func (w *watcher) bookmark(rev int64) watch.Event {
	obj := w.store.newFunc()
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatInt(rev, 10))
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

// RequestProgress asks etcd to send a progress notification, as a Bookmark, on every
// watch opened with AllowWatchBookmarks: a watch cache uses it to learn that it has seen
// every change up to etcd's current revision. Mirrors the etcd3 store's
// RequestWatchProgress in Kubernetes.
//
// Progress is requested on the watch stream named in ctx (storage.WithWatchStream).
//
// Returns ctx's error without asking once ctx has ended: clientv3 would otherwise open a
// stream for the request that nothing closes.
func (s *Store) RequestProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.watcher.RequestProgress(streamContext(ctx))
}

// streamContext requires a leader and puts ctx's watch stream name into the gRPC
// metadata, which is how clientv3 groups watches into streams.
func streamContext(ctx context.Context) context.Context {
	if name := storage.WatchStream(ctx); name != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "skiff-watch-stream", name)
	}
	return clientv3.WithRequireLeader(ctx)
}
