// Package history records a controller's history as apps/v1 ControllerRevisions: each
// revision an immutable snapshot of the controller's state (for a DaemonSet or
// StatefulSet, its pod template as a strategic merge patch) named after the controller
// and a hash of that snapshot, numbered so the newest has the highest revision. The
// DaemonSet and StatefulSet controllers use it to tell current pods from old ones and to
// keep revisionHistoryLimit revisions; kubectl rollout history and undo read the same
// objects. Mirrors k8s.io/kubernetes/pkg/controller/history (controller_history.go).
package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash"
	"hash/fnv"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// ControllerRevisionHashLabel is the label NewControllerRevision puts on a revision:
// the hash of its data (with the collision count), the suffix of its name. Kube's.
const ControllerRevisionHashLabel = "controller.kubernetes.io/hash"

// maxPrefixLength keeps ControllerRevisionName within a DNS subdomain's 253 bytes with
// room for "-" and a hash.
const maxPrefixLength = 223

// ControllerRevisionName returns "<prefix>-<hash>", the prefix (a controller's name)
// cut to 223 bytes so the name stays within 253. Mirrors ControllerRevisionName.
func ControllerRevisionName(prefix string, hash string) string {
	if len(prefix) > maxPrefixLength {
		prefix = prefix[:maxPrefixLength]
	}
	return fmt.Sprintf("%s-%s", prefix, hash)
}

// NewControllerRevision returns a revision of parent (of kind parentKind) holding data
// as its revision'th revision, not yet created: a controller reference to parent, the
// template's labels plus ControllerRevisionHashLabel, and the name
// ControllerRevisionName(parent's name, hash), the hash taken with collisionCount (nil
// counts as none). Its namespace is left empty; CreateControllerRevision creates it in
// parent's. The error is always nil (kube's signature). Mirrors NewControllerRevision.
func NewControllerRevision(parent metav1.Object, parentKind schema.GroupVersionKind, templateLabels map[string]string,
	data runtime.RawExtension, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	labelMap := make(map[string]string, len(templateLabels)+1)
	for k, v := range templateLabels {
		labelMap[k] = v
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Labels:          labelMap,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, parentKind)},
		},
		Data:     data,
		Revision: revision,
	}
	hash := HashControllerRevision(cr, collisionCount)
	cr.Name = ControllerRevisionName(parent.GetName(), hash)
	cr.Labels[ControllerRevisionHashLabel] = hash
	return cr, nil
}

// HashControllerRevision hashes revision's data with 32-bit FNV-1 (kube's fnv.New32):
// the raw bytes, then the JSON of Data.Object when it is set (kube hashes a dump of the
// object; skiff hashes its JSON), then, when probe is not nil, its decimal value, so a
// name collision can be resolved by counting. The result is the hash's decimal value
// encoded by rand.SafeEncodeString (no vowels, so no words). Mirrors
// HashControllerRevision.
func HashControllerRevision(revision *appsv1.ControllerRevision, probe *int32) string {
	hf := fnv.New32()
	if len(revision.Data.Raw) > 0 {
		hf.Write(revision.Data.Raw)
	}
	if revision.Data.Object != nil {
		deepHashObject(hf, revision.Data.Object)
	}
	if probe != nil {
		hf.Write([]byte(strconv.FormatInt(int64(*probe), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(hf.Sum32()))
}

// deepHashObject writes obj's JSON to h.
func deepHashObject(h hash.Hash, obj interface{}) {
	b, err := json.Marshal(obj)
	if err != nil {
		fmt.Fprintf(h, "%#v", obj)
		return
	}
	h.Write(b)
}

// SortControllerRevisions sorts revisions by Revision, ties by creation time, then by
// name, oldest first. Mirrors SortControllerRevisions.
func SortControllerRevisions(revisions []*appsv1.ControllerRevision) {
	sort.Stable(byRevision(revisions))
}

type byRevision []*appsv1.ControllerRevision

func (br byRevision) Len() int      { return len(br) }
func (br byRevision) Swap(i, j int) { br[i], br[j] = br[j], br[i] }
func (br byRevision) Less(i, j int) bool {
	if br[i].Revision == br[j].Revision {
		if br[j].CreationTimestamp.Equal(&br[i].CreationTimestamp) {
			return br[i].Name < br[j].Name
		}
		return br[j].CreationTimestamp.After(br[i].CreationTimestamp.Time)
	}
	return br[i].Revision < br[j].Revision
}

// EqualRevision reports whether lhs and rhs are both nil, or both hold the same data:
// when both carry a numeric ControllerRevisionHashLabel, differing hashes settle it at
// once; otherwise the raw bytes and objects are compared. Mirrors EqualRevision.
func EqualRevision(lhs *appsv1.ControllerRevision, rhs *appsv1.ControllerRevision) bool {
	if lhs == nil || rhs == nil {
		return lhs == rhs
	}
	lhsHash, lok := numericHash(lhs)
	rhsHash, rok := numericHash(rhs)
	if lok && rok && lhsHash != rhsHash {
		return false
	}
	return bytes.Equal(lhs.Data.Raw, rhs.Data.Raw) && apiequality.Semantic.DeepEqual(lhs.Data.Object, rhs.Data.Object)
}

// numericHash parses the hash label as kube does (a 32-bit decimal); false when absent
// or not a number (a SafeEncodeString'd hash usually is not).
func numericHash(cr *appsv1.ControllerRevision) (uint32, bool) {
	hs, found := cr.Labels[ControllerRevisionHashLabel]
	if !found {
		return 0, false
	}
	h, err := strconv.ParseInt(hs, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(h), true
}

// FindEqualRevisions returns the revisions EqualRevision to needle, in their order.
// Mirrors FindEqualRevisions.
func FindEqualRevisions(revisions []*appsv1.ControllerRevision, needle *appsv1.ControllerRevision) []*appsv1.ControllerRevision {
	var eq []*appsv1.ControllerRevision
	for i := range revisions {
		if EqualRevision(revisions[i], needle) {
			eq = append(eq, revisions[i])
		}
	}
	return eq
}

// Interface manages one controller's history. Implementations treat every pointer
// argument as input and never change it; returned revisions may be shared with an
// informer's cache and must be copied before they are changed. Mirrors
// history.Interface; the methods that call the apiserver take a context first.
type Interface interface {
	// ListControllerRevisions lists the revisions in parent's namespace that selector
	// matches and that parent controls or no controller does (orphans parent may adopt).
	ListControllerRevisions(parent metav1.Object, selector labels.Selector) ([]*appsv1.ControllerRevision, error)
	// CreateControllerRevision creates revision in parent's namespace, named
	// ControllerRevisionName(parent's name, HashControllerRevision(revision,
	// collisionCount)). When the name is taken by a revision with the same data, that
	// revision is returned; when by other data, *collisionCount is incremented and the
	// create retried under the new hash (the caller persists the count, e.g. in its
	// status.collisionCount). collisionCount must not be nil.
	CreateControllerRevision(ctx context.Context, parent metav1.Object, revision *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error)
	// DeleteControllerRevision deletes revision; the apiserver's error (NotFound
	// included) is returned.
	DeleteControllerRevision(ctx context.Context, revision *appsv1.ControllerRevision) error
	// UpdateControllerRevision sets revision's Revision to newRevision, retrying
	// conflicts with the cached copy, and returns what was stored.
	UpdateControllerRevision(ctx context.Context, revision *appsv1.ControllerRevision, newRevision int64) (*appsv1.ControllerRevision, error)
	// AdoptControllerRevision adds a controller reference to parent (of parentKind) to
	// an orphan revision, with the revision's uid as a precondition. A revision that
	// already has a controller is an error.
	AdoptControllerRevision(ctx context.Context, parent metav1.Object, parentKind schema.GroupVersionKind, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error)
	// ReleaseControllerRevision removes parent's owner reference from revision. A
	// revision that is gone, or that parent no longer owns, is not an error: nil, nil.
	ReleaseControllerRevision(ctx context.Context, parent metav1.Object, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error)
}

// NewHistory returns the Interface that writes through client and lists through lister
// (an informer's cache of ControllerRevisions). Mirrors NewHistory.
func NewHistory(client kubernetes.Interface, lister appslisters.ControllerRevisionLister) Interface {
	return &realHistory{client: client, lister: lister}
}

type realHistory struct {
	client kubernetes.Interface
	lister appslisters.ControllerRevisionLister
}

func (rh *realHistory) ListControllerRevisions(parent metav1.Object, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	return listOwnedOrOrphaned(rh.lister, parent, selector)
}

func listOwnedOrOrphaned(lister appslisters.ControllerRevisionLister, parent metav1.Object, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	all, err := lister.ControllerRevisions(parent.GetNamespace()).List(selector)
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ControllerRevision
	for _, cr := range all {
		if ref := metav1.GetControllerOfNoCopy(cr); ref == nil || ref.UID == parent.GetUID() {
			owned = append(owned, cr)
		}
	}
	return owned, nil
}

func (rh *realHistory) CreateControllerRevision(ctx context.Context, parent metav1.Object, revision *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	if collisionCount == nil {
		return nil, fmt.Errorf("collisionCount should not be nil")
	}
	clone := revision.DeepCopy()
	ns := parent.GetNamespace()
	clone.Namespace = ns
	revisions := rh.client.AppsV1().ControllerRevisions(ns)
	for {
		hash := HashControllerRevision(revision, collisionCount)
		clone.Name = ControllerRevisionName(parent.GetName(), hash)
		created, err := revisions.Create(ctx, clone, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return created, err
		}
		exists, err := revisions.Get(ctx, clone.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if bytes.Equal(exists.Data.Raw, clone.Data.Raw) {
			return exists, nil
		}
		*collisionCount++
	}
}

func (rh *realHistory) UpdateControllerRevision(ctx context.Context, revision *appsv1.ControllerRevision, newRevision int64) (*appsv1.ControllerRevision, error) {
	clone := revision.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if clone.Revision == newRevision {
			return nil
		}
		clone.Revision = newRevision
		updated, updateErr := rh.client.AppsV1().ControllerRevisions(clone.Namespace).Update(ctx, clone, metav1.UpdateOptions{})
		if updateErr == nil {
			clone = updated
			return nil
		}
		if cached, err := rh.lister.ControllerRevisions(clone.Namespace).Get(clone.Name); err == nil {
			clone = cached.DeepCopy()
		}
		return updateErr
	})
	return clone, err
}

func (rh *realHistory) DeleteControllerRevision(ctx context.Context, revision *appsv1.ControllerRevision) error {
	return rh.client.AppsV1().ControllerRevisions(revision.Namespace).Delete(ctx, revision.Name, metav1.DeleteOptions{})
}

// adoptPatch is the strategic merge patch that makes parent revision's controller, with
// revision's uid as a precondition.
func adoptPatch(parent metav1.Object, parentKind schema.GroupVersionKind, uid types.UID) []byte {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"ownerReferences": []metav1.OwnerReference{*metav1.NewControllerRef(parent, parentKind)},
		"uid":             uid,
	}})
	return patch
}

// releasePatch is the strategic merge patch that removes the owner reference to owner.
func releasePatch(owner, uid types.UID) []byte {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"ownerReferences": []map[string]interface{}{{"$patch": "delete", "uid": owner}},
		"uid":             uid,
	}})
	return patch
}

func (rh *realHistory) AdoptControllerRevision(ctx context.Context, parent metav1.Object, parentKind schema.GroupVersionKind, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if owner := metav1.GetControllerOfNoCopy(revision); owner != nil {
		return nil, fmt.Errorf("attempt to adopt revision owned by %v", owner)
	}
	return rh.client.AppsV1().ControllerRevisions(parent.GetNamespace()).Patch(ctx, revision.Name,
		types.StrategicMergePatchType, adoptPatch(parent, parentKind, revision.UID), metav1.PatchOptions{})
}

func (rh *realHistory) ReleaseControllerRevision(ctx context.Context, parent metav1.Object, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	released, err := rh.client.AppsV1().ControllerRevisions(revision.Namespace).Patch(ctx, revision.Name,
		types.StrategicMergePatchType, releasePatch(parent.GetUID(), revision.UID), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		// Gone, or parent no longer owns it (or nobody does).
		return nil, nil
	}
	return released, err
}

// NewFakeHistory returns an Interface over informer's store alone, for controller unit
// tests: creates, updates and deletes go straight into the store; no apiserver is
// involved. Mirrors NewFakeHistory.
func NewFakeHistory(informer appsinformers.ControllerRevisionInformer) Interface {
	return &fakeHistory{indexer: informer.Informer().GetIndexer(), lister: informer.Lister()}
}

type fakeHistory struct {
	indexer cache.Indexer
	lister  appslisters.ControllerRevisionLister
}

func (fh *fakeHistory) ListControllerRevisions(parent metav1.Object, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	return listOwnedOrOrphaned(fh.lister, parent, selector)
}

func (fh *fakeHistory) addRevision(revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	key, err := cache.MetaNamespaceKeyFunc(revision)
	if err != nil {
		return nil, err
	}
	obj, found, err := fh.indexer.GetByKey(key)
	if err != nil {
		return nil, err
	}
	if found {
		return obj.(*appsv1.ControllerRevision), apierrors.NewAlreadyExists(appsv1.Resource("controllerrevision"), revision.Name)
	}
	return revision, fh.indexer.Update(revision)
}

func (fh *fakeHistory) CreateControllerRevision(_ context.Context, parent metav1.Object, revision *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	if collisionCount == nil {
		return nil, fmt.Errorf("collisionCount should not be nil")
	}
	clone := revision.DeepCopy()
	clone.Namespace = parent.GetNamespace()
	for {
		clone.Name = ControllerRevisionName(parent.GetName(), HashControllerRevision(revision, collisionCount))
		created, err := fh.addRevision(clone)
		if apierrors.IsAlreadyExists(err) {
			if bytes.Equal(created.Data.Raw, clone.Data.Raw) {
				return created, nil
			}
			*collisionCount++
			continue
		}
		return created, err
	}
}

func (fh *fakeHistory) DeleteControllerRevision(_ context.Context, revision *appsv1.ControllerRevision) error {
	key, err := cache.MetaNamespaceKeyFunc(revision)
	if err != nil {
		return err
	}
	obj, found, err := fh.indexer.GetByKey(key)
	if err != nil {
		return err
	}
	if !found {
		return apierrors.NewNotFound(appsv1.Resource("controllerrevisions"), revision.Name)
	}
	return fh.indexer.Delete(obj)
}

func (fh *fakeHistory) UpdateControllerRevision(_ context.Context, revision *appsv1.ControllerRevision, newRevision int64) (*appsv1.ControllerRevision, error) {
	clone := revision.DeepCopy()
	clone.Revision = newRevision
	return clone, fh.indexer.Update(clone)
}

func (fh *fakeHistory) AdoptControllerRevision(_ context.Context, parent metav1.Object, parentKind schema.GroupVersionKind, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if owner := metav1.GetControllerOfNoCopy(revision); owner != nil {
		return nil, fmt.Errorf("attempt to adopt revision owned by %v", owner)
	}
	key, err := cache.MetaNamespaceKeyFunc(revision)
	if err != nil {
		return nil, err
	}
	if _, found, err := fh.indexer.GetByKey(key); err != nil || !found {
		return nil, apierrors.NewNotFound(appsv1.Resource("controllerrevisions"), revision.Name)
	}
	clone := revision.DeepCopy()
	clone.OwnerReferences = append(clone.OwnerReferences, *metav1.NewControllerRef(parent, parentKind))
	return clone, fh.indexer.Update(clone)
}

func (fh *fakeHistory) ReleaseControllerRevision(_ context.Context, parent metav1.Object, revision *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	key, err := cache.MetaNamespaceKeyFunc(revision)
	if err != nil {
		return nil, err
	}
	if _, found, err := fh.indexer.GetByKey(key); err != nil || !found {
		return nil, nil
	}
	clone := revision.DeepCopy()
	refs := clone.OwnerReferences[:0]
	for _, ref := range clone.OwnerReferences {
		if ref.UID != parent.GetUID() {
			refs = append(refs, ref)
		}
	}
	clone.OwnerReferences = refs
	return clone, fh.indexer.Update(clone)
}
