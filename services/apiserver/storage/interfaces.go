// Package storage defines the contract between the apiserver's generic registry and the
// key-value store beneath it. It mirrors k8s.io/apiserver/pkg/storage/interfaces.go, cut
// down to what skiff serves: the registry knows nothing about etcd, and this package knows
// nothing about HTTP.
package storage

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Interface offers the operations the generic registry needs on one resource. Keys are
// full etcd keys such as "/registry/pods/default/nginx"; a key ending in "/" names a
// collection (every object under it). Every object returned carries
// metadata.resourceVersion set to the etcd ModRevision it was read at.
//
// Errors are *StorageError (see errors.go); the registry turns them into
// metav1.Status errors with the resource's name.
type Interface interface {
	// Create stores obj at key if nothing is stored there yet (a Txn If
	// CreateRevision==0 Then Put) and decodes the stored object into out.
	// obj must have an empty resourceVersion. Returns ErrCodeKeyExists if key is taken.
	Create(ctx context.Context, key string, obj, out runtime.Object) error

	// Get decodes the object at key into out. With opts.IgnoreNotFound a missing key
	// leaves out zeroed and returns nil; otherwise ErrCodeKeyNotFound.
	Get(ctx context.Context, key string, opts GetOptions, out runtime.Object) error

	// GetList decodes every object under the collection key that matches opts.Predicate
	// into listObj (a *XxxList) and sets the list's resourceVersion (and continue token
	// when opts.Predicate.Limit cut the list short). opts.ResourceVersion "" and "0" read
	// the latest state; any other value reads at exactly that revision and returns
	// ErrCodeResourceVersionTooOld (410 Gone) when etcd has compacted it.
	GetList(ctx context.Context, key string, opts ListOptions, listObj runtime.Object) error

	// GuaranteedUpdate reads the object at key, checks preconditions, calls tryUpdate
	// and writes its result with a Txn If ModRevision==read revision, retrying the
	// read-modify-write from a fresh read when another writer won the race. tryUpdate
	// may be called more than once and must not mutate shared state. The result is
	// decoded into out. Returns ErrCodeKeyNotFound, ErrCodeInvalidObj on a failed
	// precondition, or tryUpdate's own error unchanged.
	//
	// If the input object carries a non-empty resourceVersion that is not the stored one,
	// tryUpdate's output is rejected with ErrCodeResourceVersionConflicts: this is how a
	// PUT with a stale resourceVersion gets 409 Conflict.
	GuaranteedUpdate(ctx context.Context, key string, out runtime.Object, preconditions *Preconditions, tryUpdate UpdateFunc) error

	// Delete removes the object at key if preconditions hold, with a Txn If
	// ModRevision==read revision (retrying like GuaranteedUpdate), and decodes the last
	// stored state into out. Returns ErrCodeKeyNotFound or ErrCodeInvalidObj.
	Delete(ctx context.Context, key string, out runtime.Object, preconditions *Preconditions) error

	// Watch streams changes to key (an object) or under key (a collection, key ending
	// in "/") that match opts.Predicate, as watch.Added/Modified/Deleted events whose
	// objects carry the resourceVersion of the change. opts.ResourceVersion "" or "0"
	// first sends a synthetic Added for every current match and then every later change;
	// any other value sends every change after that revision, in order, and none before.
	// An object that stops matching arrives as Deleted, one that starts matching as
	// Added. A compacted revision yields one watch.Error event whose object is a
	// *metav1.Status with code 410 (reason Expired), then the channel closes. The watch
	// ends when ctx is done or Stop is called.
	Watch(ctx context.Context, key string, opts ListOptions) (watch.Interface, error)
}

// CachedUpdater is a storage whose GuaranteedUpdate can start from a cached copy of the
// object (cached, with resourceVersion = its revision, which the storage may modify)
// instead of reading it first; a stale copy costs one more cycle, never a wrong
// answer. The watch cache offers its copy, as kube's Cacher passes
// cachedExistingObject to its etcd3 store.
type CachedUpdater interface {
	GuaranteedUpdateFrom(ctx context.Context, key string, out runtime.Object, preconditions *Preconditions, tryUpdate UpdateFunc, cached runtime.Object) error
}

// CachedReader is a storage that lets an in-process reader look at its cached objects
// without a copy of each: the watch cache. It serves what kube's in-process readers (the
// Node authorizer's graph, admission plugins) read from informers.
type CachedReader interface {
	// VisitCached calls visit with each cached object under prefix (a key ending in "/")
	// that p matches, as the cache holds it now (as at resourceVersion "0"), until visit
	// returns false. The objects are the cache's own: visit must neither modify them nor
	// call back into the storage (the cache is read-locked meanwhile). A reader may keep
	// them: the cache replaces an object that changes, it never modifies one. It returns
	// false, without calling visit, while the cache is not ready.
	VisitCached(prefix string, p SelectionPredicate, visit func(runtime.Object) bool) bool
	// ReadCached calls read with the cached object at key, when the cache holds one, and
	// returns false, without calling read, while the cache is not ready. The same rules
	// hold for read as for VisitCached's visit.
	ReadCached(key string, read func(runtime.Object)) bool
}

// UpdateFunc computes the new state from the current one for GuaranteedUpdate. input is
// a freshly decoded copy the function may modify and return. Returning an error aborts
// the update and GuaranteedUpdate returns that error.
type UpdateFunc func(input runtime.Object) (output runtime.Object, err error)

// Preconditions must hold for an update or delete to proceed; nil fields are not checked.
// Mirrors k8s.io/apiserver/pkg/storage.Preconditions.
type Preconditions struct {
	UID             *types.UID
	ResourceVersion *string
}

// Check returns ErrCodeInvalidObj for key, with kube's "Precondition failed: ..."
// message, when obj's uid or resourceVersion differs from a set precondition. A nil p
// always holds. Mirrors k8s.io/apiserver/pkg/storage.Preconditions.Check.
func (p *Preconditions) Check(key string, obj runtime.Object) error {
	if p == nil {
		return nil
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return NewInvalidObjError(key, err.Error())
	}
	if p.UID != nil && *p.UID != acc.GetUID() {
		return NewInvalidObjError(key, fmt.Sprintf(
			"Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, acc.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != acc.GetResourceVersion() {
		return NewInvalidObjError(key, fmt.Sprintf(
			"Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v",
			*p.ResourceVersion, acc.GetResourceVersion()))
	}
	return nil
}

// GetOptions tunes Get.
type GetOptions struct {
	// IgnoreNotFound makes a missing key return nil with out left zeroed.
	IgnoreNotFound bool
	// ResourceVersion: "" = a consistent read from etcd; "0" = any recent state (a
	// watch cache may answer); otherwise the state must be at least that new.
	ResourceVersion string
}

// ListOptions tunes GetList and Watch. Mirrors k8s.io/apiserver/pkg/storage.ListOptions.
type ListOptions struct {
	// ResourceVersion: "" or "0" = latest (and, for Watch, synthetic Added events
	// first); otherwise an etcd revision in decimal. For GetList, "" is a consistent
	// read from etcd and "0" may be served from a watch cache.
	ResourceVersion string
	// ResourceVersionMatch (GetList only): NotOlderThan or Exact, as in
	// metav1.ListOptions; empty means NotOlderThan for a non-zero ResourceVersion.
	ResourceVersionMatch metav1.ResourceVersionMatch
	// Predicate filters objects by labels and fields and pages lists.
	Predicate SelectionPredicate
	// AllowWatchBookmarks lets Watch send watch.Bookmark events whose object carries
	// only the resourceVersion up to which the watcher has seen every change.
	AllowWatchBookmarks bool
	// SendInitialEvents (Watch only, WatchList): when true, Watch first sends an Added
	// event for every object matching at ResourceVersion ("" = latest), then one
	// Bookmark annotated "k8s.io/initial-events-end": "true", then changes.
	SendInitialEvents *bool
}

// AttrFunc returns the labels and the selectable fields (e.g. "spec.nodeName") of obj.
// Mirrors k8s.io/apiserver/pkg/storage.AttrFunc.
type AttrFunc func(obj runtime.Object) (labels.Set, fields.Set, error)

// SelectionPredicate selects objects by label and field selectors; a nil selector or a
// nil GetAttrs matches everything. Limit and Continue page GetList (Limit 0 = no limit);
// Continue is the opaque token a previous page returned. Mirrors
// k8s.io/apiserver/pkg/storage.SelectionPredicate.
type SelectionPredicate struct {
	Label    labels.Selector
	Field    fields.Selector
	GetAttrs AttrFunc
	Limit    int64
	Continue string
	// IndexFields names fields (e.g. "spec.nodeName") whose exact-match requirement in
	// Field a watch cache may use to look up watchers and objects by index instead of
	// testing every one.
	IndexFields []string
}

// Empty reports whether the predicate matches every object.
func (p SelectionPredicate) Empty() bool {
	return (p.Label == nil || p.Label.Empty()) && (p.Field == nil || p.Field.Empty())
}

// Matches reports whether obj satisfies both selectors.
func (p SelectionPredicate) Matches(obj runtime.Object) (bool, error) {
	if p.Empty() || p.GetAttrs == nil {
		return true, nil
	}
	ls, fs, err := p.GetAttrs(obj)
	if err != nil {
		return false, err
	}
	if p.Label != nil && !p.Label.Matches(ls) {
		return false, nil
	}
	if p.Field != nil && !p.Field.Matches(fs) {
		return false, nil
	}
	return true, nil
}

type watchStreamKey struct{}

// WithWatchStream names the stream a watch (and a progress request) made with ctx uses.
// etcd sends a progress notification on a stream only when every watch on it has caught
// up, so a watch cache gives its watch a stream of its own rather than share one with
// every other watch of the process. Watches without a name share the default stream.
func WithWatchStream(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, watchStreamKey{}, name)
}

// WatchStream returns the stream name set by WithWatchStream, or "".
func WatchStream(ctx context.Context) string {
	name, _ := ctx.Value(watchStreamKey{}).(string)
	return name
}
