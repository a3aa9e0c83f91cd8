package cacher

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/storage"
)

// entry is one cached object with its selector attributes, computed once when the object
// enters the cache. Mirrors watch_cache's storeElement.
type entry struct {
	key    string
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
}

// matches applies pred's selectors to the entry's precomputed attributes.
func (e *entry) matches(pred storage.SelectionPredicate) bool {
	if pred.Label != nil && !pred.Label.Matches(e.labels) {
		return false
	}
	return pred.Field == nil || pred.Field.Matches(e.fields)
}

// event is one change as kept in the ring and offered to watchers, with both states so
// that each watcher can apply its own selector to each. Mirrors watchCacheEvent.
type event struct {
	typ watch.EventType // Added, Modified, Deleted; Bookmark for a bookmark
	key string
	rv  uint64
	cur *entry // the new state; nil for Deleted and Bookmark
	// prev is the state before the change; nil for Added and Bookmark.
	prev *entry
	// deleted is, for Deleted, the last state with resourceVersion = the delete's.
	deleted runtime.Object
}

// objectStore holds the current objects by key, their keys in order, and an index per
// indexed field. It is not safe for concurrent use: the Cacher guards it with its mutex.
type objectStore struct {
	byKey       map[string]*entry
	keys        []string // sorted, so lists come out in key order without sorting
	indexFields []string
	index       map[string]map[string]map[string]*entry // field → value → key → entry
}

func newObjectStore(indexFields []string, entries []*entry) *objectStore {
	s := &objectStore{byKey: make(map[string]*entry, len(entries)), keys: make([]string, 0, len(entries)),
		indexFields: indexFields, index: map[string]map[string]map[string]*entry{}}
	for _, f := range indexFields {
		s.index[f] = map[string]map[string]*entry{}
	}
	for _, e := range entries {
		if _, dup := s.byKey[e.key]; !dup {
			s.keys = append(s.keys, e.key)
		}
		s.byKey[e.key] = e
		s.indexAdd(e)
	}
	slices.Sort(s.keys)
	return s
}

func (s *objectStore) get(key string) *entry { return s.byKey[key] }

// put stores e and returns the entry it replaced, if any.
func (s *objectStore) put(e *entry) *entry {
	prev := s.byKey[e.key]
	if prev != nil {
		s.indexRemove(prev)
	} else {
		i, _ := slices.BinarySearch(s.keys, e.key)
		s.keys = slices.Insert(s.keys, i, e.key)
	}
	s.byKey[e.key] = e
	s.indexAdd(e)
	return prev
}

// remove deletes key and returns the entry it held, if any.
func (s *objectStore) remove(key string) *entry {
	prev := s.byKey[key]
	if prev == nil {
		return nil
	}
	delete(s.byKey, key)
	if i, ok := slices.BinarySearch(s.keys, key); ok {
		s.keys = slices.Delete(s.keys, i, i+1)
	}
	s.indexRemove(prev)
	return prev
}

func (s *objectStore) indexAdd(e *entry) {
	for _, f := range s.indexFields {
		v := e.fields[f]
		byValue := s.index[f][v]
		if byValue == nil {
			byValue = map[string]*entry{}
			s.index[f][v] = byValue
		}
		byValue[e.key] = e
	}
}

func (s *objectStore) indexRemove(e *entry) {
	for _, f := range s.indexFields {
		v := e.fields[f]
		delete(s.index[f][v], e.key)
		if len(s.index[f][v]) == 0 {
			delete(s.index[f], v)
		}
	}
}

// list returns, in key order, the entries under prefix (a collection key ending in "/"),
// only those whose indexed field has the given value when by.ok.
func (s *objectStore) list(prefix string, by indexValue) []*entry {
	if by.ok {
		var out []*entry
		for key, e := range s.index[by.field][by.value] {
			if strings.HasPrefix(key, prefix) {
				out = append(out, e)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
		return out
	}
	i, _ := slices.BinarySearch(s.keys, prefix)
	j := i
	for j < len(s.keys) && strings.HasPrefix(s.keys[j], prefix) {
		j++
	}
	out := make([]*entry, j-i)
	for n, key := range s.keys[i:j] {
		out[n] = s.byKey[key]
	}
	return out
}

// indexValue names one value of one indexed field.
type indexValue struct {
	field, value string
	ok           bool
}

// indexedValue returns the first field that is both indexed by the cache and named in
// pred.IndexFields and that pred's field selector requires to equal one value. Mirrors
// SelectionPredicate.MatcherIndex.
func indexedValue(pred storage.SelectionPredicate, cacheIndexFields []string) indexValue {
	if pred.Field == nil {
		return indexValue{}
	}
	for _, f := range pred.IndexFields {
		if !slices.Contains(cacheIndexFields, f) {
			continue
		}
		if v, ok := pred.Field.RequiresExactMatch(f); ok {
			return indexValue{field: f, value: v, ok: true}
		}
	}
	return indexValue{}
}

// inScope reports whether object key k is under the watched key (a collection ending in
// "/"), or is the watched key itself.
func inScope(key, k string) bool {
	if strings.HasSuffix(key, "/") {
		return strings.HasPrefix(k, key)
	}
	return k == key
}

// eventRing holds the most recent events in revision order: every change after
// oldestRV, and at most capacity of them beyond those a backfill added. Mirrors
// watchCache's cyclic buffer (with a fixed capacity). Not safe for concurrent use.
type eventRing struct {
	capacity int
	events   []*event
	oldestRV uint64
	// backfilled counts the events at the front that a backfill added; they do not
	// count against capacity and go as soon as the oldest live event must.
	backfilled int
}

func newEventRing(capacity int, rv uint64) *eventRing {
	return &eventRing{capacity: capacity, oldestRV: rv}
}

// add appends e, dropping the oldest events beyond capacity.
func (r *eventRing) add(e *event) {
	if len(r.events)-r.backfilled >= r.capacity {
		drop := r.backfilled + 1
		r.oldestRV = r.events[drop-1].rv
		clear(r.events[:drop])
		r.events = r.events[drop:]
		r.backfilled = 0
	}
	r.events = append(r.events, e)
}

// since returns the events after rv, oldest first, in a slice of the caller's own: a
// watcher replays them after the cache's lock is released, while add keeps dropping
// (and clearing) the ring's oldest entries. ok is false when the ring no longer holds
// every change after rv.
func (r *eventRing) since(rv uint64) (events []*event, ok bool) {
	if rv < r.oldestRV {
		return nil, false
	}
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i].rv > rv })
	return slices.Clone(r.events[i:]), true
}

// prepend puts events, every change after from up to the ring's oldest revision, in
// front of the ring.
func (r *eventRing) prepend(events []*event, from uint64) {
	r.events = append(slices.Clip(events), r.events...)
	r.backfilled += len(events)
	r.oldestRV = from
}

// progressRequester asks Storage for progress notifications on the cache's watch every
// 100 ms for as long as someone waits for the cache to catch up, so that waiting for a
// revision on an idle resource takes one round trip instead of the next change. Mirrors
// cacher's conditionalProgressRequester.
type progressRequester struct {
	request func(ctx context.Context) error // nil: nothing to ask
	mu      sync.Mutex
	waiters int
	wake    chan struct{} // capacity 1

	// requestMu makes requests and the end of the watch exclusive: clientv3 opens a new
	// gRPC stream for a progress request on a stream that has no watch, and nothing
	// would ever close it.
	requestMu sync.Mutex
	watching  bool
}

// setWatching says whether the watch the requests are for is open.
func (p *progressRequester) setWatching(on bool) {
	p.requestMu.Lock()
	p.watching = on
	p.requestMu.Unlock()
}

// progressInterval is how often progress is requested while someone waits.
const progressInterval = 100 * time.Millisecond

func newProgressRequester(request func(ctx context.Context) error) *progressRequester {
	return &progressRequester{request: request, wake: make(chan struct{}, 1)}
}

// want registers a waiter and returns the function that unregisters it.
func (p *progressRequester) want() (done func()) {
	p.mu.Lock()
	p.waiters++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}
}

// run requests progress while there are waiters and the watch is open, until ctx ends.
// ctx names the watch's stream.
func (p *progressRequester) run(ctx context.Context) {
	if p.request == nil {
		return
	}
	ticker := time.NewTicker(progressInterval)
	defer ticker.Stop()
	for {
		p.mu.Lock()
		waiting := p.waiters > 0
		p.mu.Unlock()
		if waiting {
			p.requestMu.Lock()
			if p.watching && ctx.Err() == nil {
				reqCtx, cancel := context.WithTimeout(ctx, progressInterval)
				_ = p.request(reqCtx) // a failed request is retried on the next tick
				cancel()
			}
			p.requestMu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
	}
}
