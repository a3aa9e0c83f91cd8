package etcd3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage"
)

// ErrResourceVersionSetOnCreate is wrapped by the error Create returns when obj carries
// a resourceVersion. Kubernetes' etcd3 store returns the same condition as a plain error
// ("resourceVersion should not be set on objects to be created"), i.e. 500: the registry
// is expected to clear it first.
var ErrResourceVersionSetOnCreate = errors.New("resourceVersion should not be set on objects to be created")

// maxListBatch caps how many keys one etcd range read of a filtered, paged GetList
// fetches (Kubernetes' etcd3 store uses the same cap).
const maxListBatch = 10000

// Store is storage.Interface on etcd v3 for one resource. It mirrors
// k8s.io/apiserver/pkg/storage/etcd3.store. A Store holds no state besides its
// dependencies and is safe for concurrent use.
type Store struct {
	kv      clientv3.KV
	watcher clientv3.Watcher
	codec   runtime.Codec
	newFunc func() runtime.Object
}

var _ storage.Interface = (*Store)(nil)

// New returns a Store that reads and writes through client, encodes objects with codec
// (e.g. scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion)) and uses newFunc to make
// an empty object of the resource (e.g. &corev1.Pod{}) to decode list items and watch
// events into. The caller keeps ownership of client.
func New(client *clientv3.Client, codec runtime.Codec, newFunc func() runtime.Object) *Store {
	return &Store{kv: client.KV, watcher: client.Watcher, codec: codec, newFunc: newFunc}
}

// CurrentRevision returns etcd's current revision: the resourceVersion a write made now
// would be compared against. It is one count-only range read.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	resp, err := s.kv.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Create implements storage.Interface.Create: a Txn If(CreateRevision(key)==0)
// Then(Put) Else(Get). out (may be nil) receives the stored object with resourceVersion
// = the put's revision. Returns *StorageError ErrCodeKeyExists (ResourceVersion = the
// existing object's ModRevision) or an error wrapping ErrResourceVersionSetOnCreate.
func (s *Store) Create(ctx context.Context, key string, obj, out runtime.Object) error {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	if acc.GetResourceVersion() != "" {
		return fmt.Errorf("create %s: %w", key, ErrResourceVersionSetOnCreate)
	}
	data, err := s.encode(obj)
	if err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, bytesAsString(data))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	if !resp.Succeeded {
		var rev int64
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			rev = kvs[0].ModRevision
		}
		return storage.NewKeyExistsError(key, rev)
	}
	return s.decode(data, out, resp.Header.Revision)
}

// Get implements storage.Interface.Get: one linearizable read of key, which is always at
// least as new as any opts.ResourceVersion ("", "0" or N) a client can hold; N newer than
// etcd's revision fails with storage.ErrResourceVersionTooLarge (504), as Kubernetes'
// validateMinimumResourceVersion does. Returns *StorageError ErrCodeKeyNotFound unless
// opts.IgnoreNotFound, which zeroes out instead, and storage.ErrInvalidResourceVersion
// (400) for a malformed opts.ResourceVersion.
func (s *Store) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	minRev, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	resp, err := s.kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if minRev > resp.Header.Revision {
		return fmt.Errorf("get %s: resource version %d, etcd is at %d: %w",
			key, minRev, resp.Header.Revision, storage.ErrResourceVersionTooLarge)
	}
	if len(resp.Kvs) == 0 {
		if opts.IgnoreNotFound {
			return setZero(out)
		}
		return storage.NewKeyNotFoundError(key, 0)
	}
	kv := resp.Kvs[0]
	return s.decode(kv.Value, out, kv.ModRevision)
}

// GetList implements storage.Interface.GetList with one consistent snapshot: every page
// and every etcd batch of one list reads at the same revision, which is the list's
// resourceVersion. key is a collection key; a missing trailing "/" is added so that
// "/registry/pods/default" never matches namespace "default2".
//
// opts.ResourceVersionMatch NotOlderThan with a revision N reads the latest state
// instead and fails with storage.ErrResourceVersionTooLarge if etcd is not at N yet (as
// Kubernetes does: such a list never gets 410); Exact, or no match, reads at exactly N.
//
// Paging (opts.Predicate.Limit > 0) returns at most Limit matching items and, when more
// keys remain, a continue token: base64url (unpadded) JSON {"v","rv","start"} where
// start is the next key relative to key, as Kubernetes encodes it. A continue request
// must leave ResourceVersion "" or "0"; it reads at the token's revision.
//
// Errors: *StorageError ErrCodeResourceVersionTooOld (410) when the revision, explicit
// or from a continue token, is compacted; storage.ErrInvalidResourceVersion and
// storage.ErrInvalidContinue (400); storage.ErrResourceVersionTooLarge (504).
func (s *Store) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	listAcc, err := meta.ListAccessor(listObj)
	if err != nil {
		return fmt.Errorf("list %s: %w", key, err)
	}
	prefix := key
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	rev, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return fmt.Errorf("list %s: %w", key, err)
	}
	pred := opts.Predicate
	var minRev int64 // NotOlderThan: the oldest revision the latest state may be at
	if opts.ResourceVersionMatch == metav1.ResourceVersionMatchNotOlderThan && pred.Continue == "" {
		minRev, rev = rev, 0
	}
	startKey := prefix
	if pred.Continue != "" {
		if rev != 0 {
			return fmt.Errorf("list %s: %w: resourceVersion %q is not allowed with a continue token",
				key, storage.ErrInvalidContinue, opts.ResourceVersion)
		}
		tokenRev, start, err := decodeContinue(pred.Continue)
		if err != nil {
			return fmt.Errorf("list %s: %w", key, err)
		}
		rev, startKey = max(tokenRev, 0), prefix+start
	}
	limit := max(pred.Limit, 0)
	batch := limit
	rangeEnd := clientv3.GetPrefixRangeEnd(prefix)

	var items []runtime.Object
	var next string   // key the next page starts at; "" = no next page
	var inRange int64 // keys from the first page's start to the range's end
	for {
		ops := []clientv3.OpOption{clientv3.WithRange(rangeEnd)}
		if batch > 0 {
			ops = append(ops, clientv3.WithLimit(batch))
		}
		if rev > 0 {
			ops = append(ops, clientv3.WithRev(rev))
		}
		resp, err := s.kv.Get(ctx, startKey, ops...)
		if err != nil {
			if pred.Continue != "" && errors.Is(err, rpctypes.ErrCompacted) {
				return expiredContinue(strings.TrimPrefix(startKey, prefix))
			}
			return s.listError(ctx, key, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if inRange == 0 {
			inRange = resp.Count
		}
		full := false
		for i, kv := range resp.Kvs {
			obj, err := s.decodeNew(kv.Value, kv.ModRevision)
			if err != nil {
				return fmt.Errorf("list %s: %w", key, err)
			}
			ok, err := pred.Matches(obj)
			if err != nil {
				return fmt.Errorf("list %s: match %s: %w", key, kv.Key, err)
			}
			if ok {
				items = append(items, obj)
			}
			if limit > 0 && int64(len(items)) == limit {
				full = true
				if i < len(resp.Kvs)-1 || resp.More {
					next = string(kv.Key) + "\x00"
				}
				break
			}
		}
		if full || !resp.More || len(resp.Kvs) == 0 {
			break
		}
		// The predicate filtered some keys out: read on from after the last key, at
		// the same revision, in growing batches.
		startKey = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		batch = min(batch*2, maxListBatch)
	}

	if minRev > rev {
		return fmt.Errorf("list %s: resource version %d, etcd is at %d: %w", key, minRev, rev, storage.ErrResourceVersionTooLarge)
	}
	if err := meta.SetList(listObj, items); err != nil {
		return fmt.Errorf("list %s: %w", key, err)
	}
	listAcc.SetResourceVersion(strconv.FormatInt(rev, 10))
	token := ""
	listAcc.SetRemainingItemCount(nil)
	if next != "" {
		token = encodeContinue(rev, strings.TrimPrefix(next, prefix))
		if pred.Empty() {
			// Every key is an item: those after this page are counted, as kube's
			// store does for an unfiltered list.
			remaining := inRange - int64(len(items))
			listAcc.SetRemainingItemCount(&remaining)
		}
	}
	listAcc.SetContinue(token)
	return nil
}

// expiredContinue is the 410 for a continue token whose revision etcd has compacted:
// kube's ResourceExpired with a token, in the status's metadata.continue, that goes on
// from start at the latest revision (an inconsistent list, as the message says).
// Mirrors handleCompactedErrorForPaging.
func expiredContinue(start string) error {
	err := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response to " +
		"retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - " +
		"objects that were created, modified, or deleted between the time the first chunk was returned and now may " +
		"show up in the list.")
	err.ErrStatus.ListMeta.Continue = encodeContinue(inconsistentContinueRev, start)
	return err
}

// listError turns an etcd range error at rev into the storage error the contract names.
func (s *Store) listError(ctx context.Context, key string, rev int64, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return storage.NewTooOldResourceVersionError(rev, s.compactRevision(ctx, key, rev))
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("list %s at revision %d: %w", key, rev, storage.ErrResourceVersionTooLarge)
	default:
		return fmt.Errorf("list %s: %w", key, err)
	}
}

// compactRevision returns the revision etcd has compacted up to, given that rev is
// compacted, or 0 if it cannot tell. etcd reports it only on a watch, so this opens one
// at rev, which the server answers at once with a compacted response.
func (s *Store) compactRevision(ctx context.Context, key string, rev int64) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, ok := <-s.watcher.Watch(ctx, key, clientv3.WithRev(rev))
	if !ok {
		return 0
	}
	return resp.CompactRevision
}

// GuaranteedUpdate implements storage.Interface.GuaranteedUpdate, mirroring Kubernetes'
// etcd3 store: read, check preconditions, call tryUpdate on a freshly decoded copy
// (resourceVersion = the read revision), then Txn If(ModRevision(key)==read revision)
// Then(Put) Else(Get); a lost race repeats the whole cycle on the Else read.
//
// If tryUpdate returns an object whose resourceVersion is non-empty and differs from the
// revision it was given, the update fails with ErrCodeResourceVersionConflicts (409):
// the caller based its change on a state that is no longer current. If the encoded
// result equals the stored bytes nothing is written and out gets the current object
// with its current resourceVersion (no-op updates do not bump the revision).
//
// Errors: *StorageError ErrCodeKeyNotFound, ErrCodeInvalidObj (failed precondition),
// ErrCodeResourceVersionConflicts; tryUpdate's own error unchanged.
func (s *Store) GuaranteedUpdate(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) error {
	return s.GuaranteedUpdateFrom(ctx, key, out, preconditions, tryUpdate, nil)
}

// GuaranteedUpdateFrom implements storage.CachedUpdater: GuaranteedUpdate starting from
// cached (a copy the store may modify, with resourceVersion = its revision) instead of a
// read, as Kubernetes' etcd3 store starts from its cachedExistingObject. A state taken
// from cached is trusted only as far as the write's condition: when a precondition,
// tryUpdate or the resourceVersion check fails on it, or the result equals it, the
// cycle repeats from a read before any answer is given. nil cached reads first.
func (s *Store) GuaranteedUpdateFrom(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cached runtime.Object) error {
	var state *objState
	var err error
	if cached != nil {
		state, err = s.stateOf(cached)
	}
	current := state == nil // whether state is etcd's as read, not the cache's
	if current {
		if state, err = s.read(ctx, key); err != nil {
			return fmt.Errorf("update %s: %w", key, err)
		}
	}
	for {
		if state == nil {
			return storage.NewKeyNotFoundError(key, 0)
		}
		data, err := s.updateState(key, state, preconditions, tryUpdate)
		if err != nil && !current {
			// Judged on the cache's state: judge again on etcd's.
			if state, err = s.read(ctx, key); err != nil {
				return fmt.Errorf("update %s: %w", key, err)
			}
			current = true
			continue
		}
		if errors.Is(err, errUnchanged) {
			return s.decode(state.data, out, state.rev)
		}
		if err != nil {
			return err
		}
		txn, err := s.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", state.rev)).
			Then(clientv3.OpPut(key, bytesAsString(data))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("update %s: %w", key, err)
		}
		if txn.Succeeded {
			return s.decode(data, out, txn.Header.Revision)
		}
		current = true
		if state, err = s.stateFrom(txn.Responses[0].GetResponseRange().GetKvs()); err != nil {
			return fmt.Errorf("update %s: %w", key, err)
		}
	}
}

// errUnchanged is updateState's answer when the update would store the same bytes.
var errUnchanged = errors.New("unchanged")

// updateState checks preconditions on state, calls tryUpdate on its object and returns
// the result encoded for storage; errUnchanged when that is state's own bytes, and
// ErrCodeResourceVersionConflicts when the result's resourceVersion names another state.
func (s *Store) updateState(key string, state *objState, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) ([]byte, error) {
	if err := preconditions.Check(key, state.obj); err != nil {
		return nil, err
	}
	updated, err := tryUpdate(state.obj)
	if err != nil {
		return nil, err
	}
	acc, err := meta.Accessor(updated)
	if err != nil {
		return nil, fmt.Errorf("update %s: %w", key, err)
	}
	if rv := acc.GetResourceVersion(); rv != "" && rv != strconv.FormatInt(state.rev, 10) {
		return nil, storage.NewResourceVersionConflictsError(key, state.rev)
	}
	data, err := s.encode(updated)
	if err != nil {
		return nil, fmt.Errorf("update %s: %w", key, err)
	}
	if bytes.Equal(data, state.data) {
		return nil, errUnchanged
	}
	return data, nil
}

// read is the key's state in etcd; nil when it does not exist.
func (s *Store) read(ctx context.Context, key string) (*objState, error) {
	resp, err := s.kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.stateFrom(resp.Kvs)
}

// Delete implements storage.Interface.Delete, mirroring Kubernetes' etcd3 conditional
// delete: read, check preconditions, Txn If(ModRevision(key)==read revision)
// Then(Delete) Else(Get), repeating on a lost race. out receives the last stored state
// with resourceVersion = the revision of the delete itself (as Kubernetes does, and as
// the watch's DELETED event carries).
//
// Errors: *StorageError ErrCodeKeyNotFound, ErrCodeInvalidObj (failed precondition).
func (s *Store) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions) error {
	state, err := s.read(ctx, key)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	for {
		if state == nil {
			return storage.NewKeyNotFoundError(key, 0)
		}
		if err := preconditions.Check(key, state.obj); err != nil {
			return err
		}
		txn, err := s.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", state.rev)).
			Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		if txn.Succeeded {
			return s.decode(state.data, out, txn.Header.Revision)
		}
		if state, err = s.stateFrom(txn.Responses[0].GetResponseRange().GetKvs()); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
	}
}

// objState is one read of a key: the stored bytes, their ModRevision and a decoded copy
// whose resourceVersion is that revision.
type objState struct {
	obj  runtime.Object
	data []byte
	rev  int64
}

// stateFrom decodes the result of a single-key read; nil means the key does not exist.
func (s *Store) stateFrom(kvs []*mvccpb.KeyValue) (*objState, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	kv := kvs[0]
	obj, err := s.decodeNew(kv.Value, kv.ModRevision)
	if err != nil {
		return nil, err
	}
	return &objState{obj: obj, data: kv.Value, rev: kv.ModRevision}, nil
}

// stateOf is the state an object read elsewhere (a watch cache) stands for: the object,
// its revision (its resourceVersion) and its bytes as this store encodes them. nil when
// obj has no resourceVersion to trust.
func (s *Store) stateOf(obj runtime.Object) (*objState, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rev, err := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
	if err != nil || rev <= 0 {
		return nil, nil
	}
	data, err := s.encode(obj)
	if err != nil {
		return nil, err
	}
	return &objState{obj: obj, data: data, rev: rev}, nil
}

// encode serializes obj with resourceVersion cleared (it is never stored: it is the
// ModRevision). obj's resourceVersion is cleared while it is encoded and then put back,
// so obj must be the caller's own: not read by anyone else meanwhile.
func (s *Store) encode(obj runtime.Object) ([]byte, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if rv := acc.GetResourceVersion(); rv != "" {
		acc.SetResourceVersion("")
		defer acc.SetResourceVersion(rv)
	}
	return scheme.Encode(s.codec, obj, &runtime.SimpleAllocator{})
}

// decode fills out (zeroed first, since decoding into a used object merges maps and
// slices) from data and sets its resourceVersion to rev. A nil out asks for nothing.
func (s *Store) decode(data []byte, out runtime.Object, rev int64) error {
	if out == nil {
		return nil
	}
	if err := setZero(out); err != nil {
		return err
	}
	got, _, err := s.codec.Decode(data, nil, out)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if got != out {
		return fmt.Errorf("decode: stored object is %T, want %T", got, out)
	}
	return setResourceVersion(out, rev)
}

// bytesAsString returns data as a string without copying it, for clientv3.OpPut, which
// takes a value as a string only to copy it into its request at once ([]byte(val)):
// string(data) would copy each stored object once more (1.7 % of the control plane's
// allocations in the 5,000-pod benchmark). data must not change afterwards; the store
// only decodes it.
func bytesAsString(data []byte) string {
	return unsafe.String(unsafe.SliceData(data), len(data))
}

// setZero zeroes *out in place, as runtime.SetZeroValue does without its reflect.Zero,
// which allocates a zero value of the type (a pod's worth) on every call.
func setZero(out runtime.Object) error {
	v, err := conversion.EnforcePtr(out)
	if err != nil {
		return err
	}
	v.SetZero()
	return nil
}

// decodeNew decodes data into a new object of the resource with resourceVersion rev.
func (s *Store) decodeNew(data []byte, rev int64) (runtime.Object, error) {
	obj := s.newFunc()
	if err := s.decode(data, obj, rev); err != nil {
		return nil, err
	}
	return obj, nil
}

func setResourceVersion(obj runtime.Object, rev int64) error {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	return nil
}

// parseResourceVersion returns the etcd revision rv names; 0 means "latest" ("" or "0").
// As kube's APIObjectVersioner.ParseResourceVersion, rv is an unsigned decimal (no sign:
// "+5" and "-0" are ErrInvalidResourceVersion); one beyond int64, which no etcd revision
// reaches, is math.MaxInt64, a revision from the future.
func parseResourceVersion(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	rev, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", storage.ErrInvalidResourceVersion, rv)
	}
	return int64(min(rev, math.MaxInt64)), nil
}
