// Package registry holds the apiserver's generic Store: one implementation of create, get,
// list, update, delete and watch for every resource, with what differs per resource in a
// Strategy. It mirrors k8s.io/apiserver/pkg/registry/generic/registry/store.go.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/apiserver/pkg/util/dryrun"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/storage"
)

// Store implements create, get, list, update, delete and watch for one resource over a
// storage.Interface. Objects live at KeyRoot/<namespace>/<name> (namespaced) or
// KeyRoot/<name> (cluster-scoped).
type Store struct {
	// NewFunc returns an empty object of the resource's kind, e.g. &v1.Pod{}.
	NewFunc func() runtime.Object
	// NewListFunc returns an empty list, e.g. &v1.PodList{}.
	NewListFunc func() runtime.Object
	// Resource names the resource in errors, e.g. {Resource: "pods"} or
	// {Group: "coordination.k8s.io", Resource: "leases"}.
	Resource schema.GroupResource
	// Kind is used in validation errors ("Pod \"x\" is invalid"), e.g. "Pod".
	Kind string
	// KeyRoot is the etcd prefix without a trailing slash, e.g. "/registry/pods".
	KeyRoot string
	// Strategy decides what differs per resource.
	Strategy Strategy
	// Storage is the key-value store beneath.
	Storage storage.Interface
	// DeleteCollectionWorkers is how many deletes DeleteCollection runs at once; 0 means
	// DefaultDeleteCollectionWorkers. Mirrors kube-apiserver's --delete-collection-workers.
	DeleteCollectionWorkers int
	// AfterDelete, when set, runs after an object is really gone (not when it is only
	// marked for deletion, nor on a dry run) with the last stored state: services release
	// their ClusterIPs and NodePorts there. Mirrors the generic Store's AfterDelete hook.
	AfterDelete func(ctx context.Context, obj runtime.Object)
}

// DefaultDeleteCollectionWorkers is DeleteCollection's parallelism when the Store sets
// none: enough to keep etcd busy while deleting thousands of pods in a few seconds.
const DefaultDeleteCollectionWorkers = 16

var (
	_ rest.Getter            = (*Store)(nil)
	_ rest.Lister            = (*Store)(nil)
	_ rest.Creater           = (*Store)(nil)
	_ rest.Updater           = (*Store)(nil)
	_ rest.GracefulDeleter   = (*Store)(nil)
	_ rest.CollectionDeleter = (*Store)(nil)
	_ rest.Watcher           = (*Store)(nil)
	_ rest.TableConvertor    = (*Store)(nil)
	_ rest.CachedReader      = (*Store)(nil)
)

// New returns an empty object of the resource's kind.
func (e *Store) New() runtime.Object { return e.NewFunc() }

// NewList returns an empty list of the resource's kind.
func (e *Store) NewList() runtime.Object { return e.NewListFunc() }

// GetResetFields lists the fields the strategy resets (see ResetFieldsStrategy); nil
// when it resets none.
func (e *Store) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s, ok := e.Strategy.(ResetFieldsStrategy); ok {
		return s.GetResetFields()
	}
	return nil
}

// WithStrategy returns a copy of e that uses strategy: subresources such as pods/status
// share the storage and differ only in what an update may change.
func (e *Store) WithStrategy(strategy Strategy) *Store {
	c := *e
	c.Strategy = strategy
	return &c
}

// KeyFunc returns the etcd key of one object. namespace must be empty for cluster-scoped
// resources and set for namespaced ones (a BadRequest otherwise).
func (e *Store) KeyFunc(namespace, name string) (string, error) {
	if name == "" {
		return "", apierrors.NewBadRequest("name parameter required.")
	}
	if msgs := path.IsValidPathSegmentName(name); len(msgs) != 0 {
		return "", apierrors.NewBadRequest(fmt.Sprintf("Name parameter invalid: %q: %s", name, strings.Join(msgs, ";")))
	}
	if !e.Strategy.NamespaceScoped() {
		return e.KeyRoot + "/" + name, nil
	}
	if namespace == "" {
		return "", apierrors.NewBadRequest("Namespace parameter required.")
	}
	return e.KeyRoot + "/" + namespace + "/" + name, nil
}

// collectionKey returns the prefix holding every object in namespace ("" = all).
func (e *Store) collectionKey(namespace string) string {
	if namespace == "" || !e.Strategy.NamespaceScoped() {
		return e.KeyRoot + "/"
	}
	return e.KeyRoot + "/" + namespace + "/"
}

// Create stores a new object: it fills server-managed metadata (uid, creationTimestamp,
// generateName), runs the strategy's PrepareForCreate and Validate, and writes the object
// if its name is free. Errors: 400 for a namespace mismatch, 422 Invalid with one cause
// per field error, 409 AlreadyExists. Mirrors Store.Create and rest.BeforeCreate.
func (e *Store) Create(ctx context.Context, namespace string, obj runtime.Object, opts *metav1.CreateOptions) (runtime.Object, error) {
	objMeta, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if e.Strategy.NamespaceScoped() {
		if objMeta.GetNamespace() == "" {
			objMeta.SetNamespace(namespace)
		} else if namespace != "" && objMeta.GetNamespace() != namespace {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	} else {
		objMeta.SetNamespace("")
	}
	if objMeta.GetName() == "" && objMeta.GetGenerateName() != "" {
		objMeta.SetName(names.SimpleNameGenerator.GenerateName(objMeta.GetGenerateName()))
	}
	objMeta.SetUID(uuid.NewUUID())
	objMeta.SetCreationTimestamp(metav1.Now())
	objMeta.SetDeletionTimestamp(nil)
	objMeta.SetDeletionGracePeriodSeconds(nil)
	objMeta.SetResourceVersion("")
	objMeta.SetGeneration(0)
	objMeta.SetSelfLink("")

	e.Strategy.PrepareForCreate(ctx, obj)
	if errs := e.Strategy.Validate(ctx, obj); len(errs) > 0 {
		return nil, apierrors.NewInvalid(e.groupKind(), objMeta.GetName(), errs)
	}
	if dryrun.IsDryRun(opts.DryRun) {
		return obj, nil
	}
	key, err := e.KeyFunc(objMeta.GetNamespace(), objMeta.GetName())
	if err != nil {
		return nil, err
	}
	out := e.NewFunc()
	if err := e.Storage.Create(ctx, key, obj, out); err != nil {
		return nil, e.InterpretError(err, objMeta.GetName())
	}
	return out, nil
}

// Get returns the object or 404 NotFound. opts.ResourceVersion "" reads from etcd; "0"
// accepts the watch cache's state.
func (e *Store) Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	key, err := e.KeyFunc(namespace, name)
	if err != nil {
		return nil, err
	}
	var storageOpts storage.GetOptions
	if opts != nil {
		storageOpts.ResourceVersion = opts.ResourceVersion
	}
	out := e.NewFunc()
	if err := e.Storage.Get(ctx, key, storageOpts, out); err != nil {
		return nil, e.InterpretError(err, name)
	}
	return out, nil
}

// List returns the objects in namespace ("" = every namespace) matching opts' selectors.
// Errors: 400 for a field selector on an unsupported field, 410 Expired for a compacted
// resourceVersion.
func (e *Store) List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	pred, err := e.predicate(opts)
	if err != nil {
		return nil, err
	}
	list := e.NewListFunc()
	storageOpts := storage.ListOptions{ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch, Predicate: pred}
	if err := e.Storage.GetList(ctx, e.collectionKey(namespace), storageOpts, list); err != nil {
		return nil, e.InterpretError(err, "")
	}
	return list, nil
}

// VisitCached calls visit with each object in namespace ("" = every namespace) that
// opts' selectors match, as the watch cache holds it now (as at resourceVersion "0"),
// until visit returns false. The objects are the cache's own, not copies: nothing may
// modify them (see storage.CachedReader). It reports false, without calling visit, when the
// resource has no watch cache or the cache is not ready; the caller then Lists. opts'
// resourceVersion, limit and continue are ignored. Errors: 400 for a field selector on
// an unsupported field. It is for skiff's in-process readers (the Node authorizer's
// lookups), which kube's read from informers.
func (e *Store) VisitCached(namespace string, opts *metainternalversion.ListOptions, visit func(runtime.Object) bool) (bool, error) {
	cached, ok := e.Storage.(storage.CachedReader)
	if !ok {
		return false, nil
	}
	pred, err := e.predicate(opts)
	if err != nil {
		return false, err
	}
	return cached.VisitCached(e.collectionKey(namespace), pred, visit), nil
}

// ReadCached calls read with namespace/name as the watch cache holds it now (as at
// resourceVersion "0"), when it holds it, under the same rules as VisitCached: the
// object is the cache's own, and false means the cache did not serve the read. Errors:
// 400 for a name or namespace that cannot be a key.
func (e *Store) ReadCached(namespace, name string, read func(runtime.Object)) (bool, error) {
	cached, ok := e.Storage.(storage.CachedReader)
	if !ok {
		return false, nil
	}
	key, err := e.KeyFunc(namespace, name)
	if err != nil {
		return false, err
	}
	return cached.ReadCached(key, read), nil
}

// Watch streams changes in namespace ("" = every namespace) matching opts' selectors,
// from opts.ResourceVersion (see storage.Interface.Watch).
func (e *Store) Watch(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	pred, err := e.predicate(opts)
	if err != nil {
		return nil, err
	}
	w, err := e.Storage.Watch(ctx, e.collectionKey(namespace), storage.ListOptions{
		ResourceVersion:     opts.ResourceVersion,
		Predicate:           pred,
		AllowWatchBookmarks: opts.AllowWatchBookmarks,
		SendInitialEvents:   opts.SendInitialEvents,
	})
	if err != nil {
		return nil, e.InterpretError(err, "")
	}
	return w, nil
}

// predicate turns list options into a storage predicate, checking that every field the
// selector names is one the resource supports (400 "field label not supported" if not).
func (e *Store) predicate(opts *metainternalversion.ListOptions) (storage.SelectionPredicate, error) {
	pred := storage.SelectionPredicate{
		Label:    opts.LabelSelector,
		Field:    opts.FieldSelector,
		GetAttrs: e.Strategy.GetAttrs,
		Limit:    opts.Limit,
		Continue: opts.Continue,
	}
	if indexed, ok := e.Strategy.(IndexedStrategy); ok {
		pred.IndexFields = indexed.IndexFields()
	}
	if pred.Label == nil {
		pred.Label = labels.Everything()
	}
	if pred.Field == nil {
		pred.Field = fields.Everything()
	}
	_, supported, err := e.Strategy.GetAttrs(e.NewFunc())
	if err != nil {
		return pred, apierrors.NewInternalError(err)
	}
	for _, r := range pred.Field.Requirements() {
		if _, ok := supported[r.Field]; !ok {
			return pred, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return pred, nil
}

// Update replaces the object with what objInfo computes from the stored one, inside a
// GuaranteedUpdate so concurrent writers never lose each other's changes. The strategy's
// PrepareForUpdate decides what may change; server-managed metadata is kept. An object
// without a resourceVersion updates whatever is stored (unconditionally, as kube allows
// for most built-in resources), unless the strategy refuses that (422, see
// UnconditionalUpdateStrategy). Errors: 404, 409 Conflict for a stale resourceVersion
// (before validation), 422 Invalid, 400 for a name mismatch.
// Mirrors Store.Update and rest.BeforeUpdate.
func (e *Store) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	key, err := e.KeyFunc(namespace, name)
	if err != nil {
		return nil, false, err
	}
	out := e.NewFunc()
	var dryRunResult runtime.Object
	dryRun := opts != nil && dryrun.IsDryRun(opts.DryRun)
	err = e.Storage.GuaranteedUpdate(ctx, key, out, nil, func(existing runtime.Object) (runtime.Object, error) {
		obj, err := objInfo.UpdatedObject(ctx, existing)
		if err != nil {
			return nil, err
		}
		// An update without a resourceVersion is unconditional: it applies to the
		// stored object as it is (kube's AllowUnconditionalUpdate, true for the
		// built-in resources). One from a stale copy is a 409 before anything else is
		// judged, so that its writer rereads and retries rather than being told its
		// (stale) object is invalid: kube's Store.Update compares resourceVersions
		// before BeforeUpdate.
		if objMeta, err := meta.Accessor(obj); err == nil {
			existingMeta, err := meta.Accessor(existing)
			if err != nil {
				return nil, err
			}
			switch rv := objMeta.GetResourceVersion(); {
			case rv == "" && !e.allowUnconditionalUpdate():
				return nil, apierrors.NewInvalid(schema.GroupKind{Group: e.Resource.Group, Kind: e.Resource.Resource}, name, field.ErrorList{
					field.Invalid(field.NewPath("metadata", "resourceVersion"), uint64(0), "must be specified for an update")})
			case rv == "":
				objMeta.SetResourceVersion(existingMeta.GetResourceVersion())
			case rv != existingMeta.GetResourceVersion():
				return nil, apierrors.NewConflict(e.Resource, name, errors.New(registryConflictMessage))
			}
		}
		if err := e.beforeUpdate(ctx, namespace, name, obj, existing); err != nil {
			return nil, err
		}
		if dryRun {
			dryRunResult = obj
			return nil, errDryRun
		}
		return obj, nil
	})
	if errors.Is(err, errDryRun) {
		return dryRunResult, false, nil
	}
	if err != nil {
		return nil, false, e.InterpretError(err, name)
	}
	if e.shouldDeleteDuringUpdate(out) {
		// The last finalizer of an object being deleted is gone: finish the delete.
		m, _ := meta.Accessor(out)
		rv := m.GetResourceVersion()
		deleted := e.NewFunc()
		if err := e.Storage.Delete(ctx, key, deleted, &storage.Preconditions{ResourceVersion: &rv}); err != nil {
			if storage.IsNotFound(err) {
				return deleted, false, nil
			}
			return nil, false, e.InterpretError(err, name)
		}
		e.afterDelete(ctx, deleted)
		return deleted, false, nil
	}
	return out, false, nil
}

var errDryRun = errors.New("dry run: not written")

// allowUnconditionalUpdate reports whether an update without a resourceVersion is
// accepted: yes unless the strategy says otherwise (see UnconditionalUpdateStrategy).
func (e *Store) allowUnconditionalUpdate() bool {
	s, ok := e.Strategy.(UnconditionalUpdateStrategy)
	return !ok || s.AllowUnconditionalUpdate()
}

// shouldDeleteDuringUpdate reports whether obj, just written by an update, is being
// deleted and nothing holds it any more: the strategy decides when it implements
// DeleteDuringUpdateStrategy; otherwise no finalizer and no pending grace period.
func (e *Store) shouldDeleteDuringUpdate(obj runtime.Object) bool {
	if s, ok := e.Strategy.(DeleteDuringUpdateStrategy); ok {
		return s.ShouldDeleteDuringUpdate(obj)
	}
	m, err := meta.Accessor(obj)
	return err == nil && m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 &&
		(m.GetDeletionGracePeriodSeconds() == nil || *m.GetDeletionGracePeriodSeconds() == 0)
}

// KeepServerManagedMetadata gives obj the metadata a client cannot change from old:
// uid, creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds and
// generation (the strategy moves generation on), and clears selfLink. An update
// that sends other values (a patch built from an empty object carries
// "creationTimestamp": null) is not refused for them: they are ignored, as kube's
// rest.BeforeUpdate does.
func KeepServerManagedMetadata(obj, old metav1.Object) {
	obj.SetUID(old.GetUID())
	obj.SetCreationTimestamp(old.GetCreationTimestamp())
	obj.SetDeletionTimestamp(old.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(old.GetDeletionGracePeriodSeconds())
	obj.SetGeneration(old.GetGeneration())
	obj.SetSelfLink("")
}

// beforeUpdate checks identity, keeps server-managed metadata and runs the strategy.
func (e *Store) beforeUpdate(ctx context.Context, namespace, name string, obj, old runtime.Object) error {
	objMeta, err := meta.Accessor(obj)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	oldMeta, _ := meta.Accessor(old)
	if objMeta.GetName() == "" {
		objMeta.SetName(name)
	} else if objMeta.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", objMeta.GetName(), name))
	}
	if e.Strategy.NamespaceScoped() {
		if objMeta.GetNamespace() == "" {
			objMeta.SetNamespace(namespace)
		} else if objMeta.GetNamespace() != namespace {
			return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	} else {
		objMeta.SetNamespace("")
	}
	if uid := objMeta.GetUID(); uid != "" && uid != oldMeta.GetUID() {
		return apierrors.NewConflict(e.Resource, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", uid, oldMeta.GetUID()))
	}
	KeepServerManagedMetadata(objMeta, oldMeta)

	e.Strategy.PrepareForUpdate(ctx, obj, old)
	if errs := e.Strategy.ValidateUpdate(ctx, obj, old); len(errs) > 0 {
		return apierrors.NewInvalid(e.groupKind(), name, errs)
	}
	return nil
}

// Delete removes the object, or only marks it (deletionTimestamp) while something must
// happen first: a graceful delete (pods with a grace period) leaves the removal to the
// object's owner (the kubelet), and finalizers hold the object until their owners remove
// them (the update that removes the last one deletes it). opts.propagationPolicy decides
// what happens to the object's dependents, as kube's garbage collector reads it: Orphan
// adds the "orphan" finalizer, Foreground adds "foregroundDeletion", Background (the
// default, unless the strategy is an OrphanByDefaultStrategy) adds neither and the
// collector deletes the dependents after the owner is gone. The bool is true if the object is gone. Errors: 409 Conflict for failed preconditions
// (uid, resourceVersion), 422 for contradictory or unknown propagation options. Mirrors
// Store.Delete, rest.BeforeDelete and deletionFinalizersForGarbageCollection.
func (e *Store) Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	key, err := e.KeyFunc(namespace, name)
	if err != nil {
		return nil, false, err
	}
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if errs := validatePropagation(opts); len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	var preconditions *storage.Preconditions
	if p := opts.Preconditions; p != nil {
		preconditions = &storage.Preconditions{UID: p.UID, ResourceVersion: p.ResourceVersion}
	}
	existing := e.NewFunc()
	if err := e.Storage.Get(ctx, key, storage.GetOptions{}, existing); err != nil {
		return nil, false, e.InterpretError(err, name)
	}
	if err := preconditions.Check(key, existing); err != nil {
		return nil, false, e.InterpretError(err, name)
	}
	if dryrun.IsDryRun(opts.DryRun) {
		return existing, false, nil
	}
	markOpts := *opts
	graceful := false
	if gs, ok := e.Strategy.(GracefulDeleteStrategy); ok {
		graceful = gs.CheckGracefulDelete(ctx, existing, &markOpts)
	}
	if !graceful {
		zero := int64(0)
		markOpts.GracePeriodSeconds = &zero
	}
	existingMeta, _ := meta.Accessor(existing)
	if _, changed := deletionFinalizers(existingMeta, opts, e.orphanByDefault()); graceful || changed || len(existingMeta.GetFinalizers()) > 0 {
		out, pending, err := e.markForDeletion(ctx, key, name, preconditions, &markOpts)
		if err != nil || pending {
			return out, false, err
		}
		// Nothing holds the object any more (a grace period shortened to zero, the
		// last finalizer gone): delete the state just written, and only that.
		outMeta, _ := meta.Accessor(out)
		version := outMeta.GetResourceVersion()
		preconditions = &storage.Preconditions{ResourceVersion: &version}
	}
	out := e.NewFunc()
	if err := e.Storage.Delete(ctx, key, out, preconditions); err != nil {
		if storage.IsInvalidObj(err) {
			return nil, false, apierrors.NewConflict(e.Resource, name, err)
		}
		return nil, false, e.InterpretError(err, name)
	}
	e.afterDelete(ctx, out)
	return out, true, nil
}

// DeleteCollection lists the objects in namespace ("" = every namespace) matching
// listOpts and deletes each as Delete does with opts (pods gracefully, objects with
// finalizers only marked), in DeleteCollectionWorkers parallel workers. deleteValidation
// (admission) runs on each object first; the first error it or a delete returns is the
// result, objects already gone are skipped. It returns the list as it was read. Mirrors
// Store.DeleteCollection in k8s.io/apiserver/pkg/registry/generic/registry/store.go.
func (e *Store) DeleteCollection(ctx context.Context, namespace string, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions, listOpts *metainternalversion.ListOptions) (runtime.Object, error) {
	if listOpts == nil {
		listOpts = &metainternalversion.ListOptions{}
	} else {
		listOpts = listOpts.DeepCopy()
	}
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	listObj, err := e.List(ctx, namespace, listOpts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(listObj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	workers := e.DeleteCollectionWorkers
	if workers <= 0 {
		workers = DefaultDeleteCollectionWorkers
	}
	workers = min(workers, len(items))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan runtime.Object)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for item := range next {
				if err := e.deleteItem(ctx, item, deleteValidation, opts); err != nil {
					errs <- err
					cancel() // the first failure stops the rest, as in kube
					return
				}
			}
		}()
	}
feed:
	for _, item := range items {
		select {
		case next <- item:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return listObj, nil
}

// deleteItem deletes one object DeleteCollection listed; one already gone is no error.
func (e *Store) deleteItem(ctx context.Context, item runtime.Object, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions) error {
	m, err := meta.Accessor(item)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if deleteValidation != nil {
		if err := deleteValidation(ctx, item); err != nil {
			return err
		}
	}
	if _, _, err := e.Delete(ctx, m.GetNamespace(), m.GetName(), opts.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// afterDelete runs the AfterDelete hook, if any.
func (e *Store) afterDelete(ctx context.Context, obj runtime.Object) {
	if e.AfterDelete != nil {
		e.AfterDelete(ctx, obj)
	}
}

// validatePropagation mirrors the DeleteOptions checks of kube's ValidateDeleteOptions.
func validatePropagation(opts *metav1.DeleteOptions) field.ErrorList {
	var errs field.ErrorList
	if opts.OrphanDependents != nil && opts.PropagationPolicy != nil {
		errs = append(errs, field.Invalid(field.NewPath("propagationPolicy"), opts.PropagationPolicy, "orphanDependents and deletionPropagation cannot be both set"))
	}
	if p := opts.PropagationPolicy; p != nil && *p != metav1.DeletePropagationForeground &&
		*p != metav1.DeletePropagationBackground && *p != metav1.DeletePropagationOrphan {
		errs = append(errs, field.NotSupported(field.NewPath("propagationPolicy"), *p,
			[]string{string(metav1.DeletePropagationForeground), string(metav1.DeletePropagationBackground), string(metav1.DeletePropagationOrphan)}))
	}
	return errs
}

// orphanByDefault reports whether a delete naming no propagation policy orphans the
// object's dependents (see OrphanByDefaultStrategy).
func (e *Store) orphanByDefault() bool {
	s, ok := e.Strategy.(OrphanByDefaultStrategy)
	return ok && s.OrphanDependentsByDefault()
}

// deletionFinalizers returns the finalizers an object should carry once deleted with
// opts, and whether they differ from what it carries: the garbage collector's "orphan"
// finalizer for the Orphan policy (or orphanDependents: true), "foregroundDeletion" for
// Foreground, neither for Background. With no policy in opts, a finalizer already there
// decides, else Orphan when orphanByDefault, else Background. Mirrors
// deletionFinalizersForGarbageCollection, shouldOrphanDependents and
// shouldDeleteDependents.
func deletionFinalizers(m metav1.Object, opts *metav1.DeleteOptions, orphanByDefault bool) ([]string, bool) {
	current := m.GetFinalizers()
	has := func(f string) bool {
		for _, c := range current {
			if c == f {
				return true
			}
		}
		return false
	}
	var orphan, foreground bool
	switch {
	case opts.PropagationPolicy != nil:
		orphan = *opts.PropagationPolicy == metav1.DeletePropagationOrphan
		foreground = *opts.PropagationPolicy == metav1.DeletePropagationForeground
	case opts.OrphanDependents != nil:
		orphan = *opts.OrphanDependents
	default:
		orphan, foreground = has(metav1.FinalizerOrphanDependents), has(metav1.FinalizerDeleteDependents)
		orphan = orphan || (orphanByDefault && !foreground)
	}
	var want []string
	for _, f := range current {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			want = append(want, f)
		}
	}
	if orphan {
		want = append(want, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		want = append(want, metav1.FinalizerDeleteDependents)
	}
	if sets.New(want...).Equal(sets.New(current...)) {
		return current, false
	}
	return want, true
}

// markForDeletion sets the deletion finalizers opts asks for (see deletionFinalizers),
// deletionTimestamp = now + grace and deletionGracePeriodSeconds, never lengthening an
// earlier, shorter grace period. It reports pending=false when nothing holds the object
// any more (grace period zero, no finalizers), meaning the caller should delete at once.
// Mirrors rest.BeforeDelete and Store.updateForGracefulDeletionAndFinalizers.
func (e *Store) markForDeletion(ctx context.Context, key, name string, preconditions *storage.Preconditions, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	grace := int64(0)
	if opts.GracePeriodSeconds != nil {
		grace = *opts.GracePeriodSeconds
	}
	pending := true
	out := e.NewFunc()
	err := e.Storage.GuaranteedUpdate(ctx, key, out, preconditions, func(existing runtime.Object) (runtime.Object, error) {
		m, err := meta.Accessor(existing)
		if err != nil {
			return nil, err
		}
		if finalizers, changed := deletionFinalizers(m, opts, e.orphanByDefault()); changed {
			m.SetFinalizers(finalizers)
		}
		gracePending := false
		switch current := m.GetDeletionGracePeriodSeconds(); {
		case m.GetDeletionTimestamp() != nil && current != nil && *current <= grace:
			// Already marked with a grace period at least as short: keep it.
			gracePending = *current > 0
		case grace == 0 && m.GetDeletionTimestamp() != nil:
			// Shortened to zero.
			m.SetDeletionGracePeriodSeconds(&grace)
		default:
			now := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
			m.SetDeletionTimestamp(&now)
			m.SetDeletionGracePeriodSeconds(&grace)
			gracePending = grace > 0
		}
		pending = gracePending || len(m.GetFinalizers()) > 0
		return existing, nil
	})
	if err != nil {
		if storage.IsInvalidObj(err) {
			return nil, false, apierrors.NewConflict(e.Resource, name, err)
		}
		return nil, false, e.InterpretError(err, name)
	}
	return out, pending, nil
}

// InterpretError maps storage errors to API errors with this resource's name, as
// k8s.io/apiserver/pkg/registry/generic/registry/storage_factory's storeerr does.
// Errors that already are API errors pass through.
func (e *Store) InterpretError(err error, name string) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	var se *storage.StorageError
	if !errors.As(err, &se) {
		switch {
		case errors.Is(err, storage.ErrInvalidResourceVersion), errors.Is(err, storage.ErrInvalidContinue):
			return apierrors.NewBadRequest(err.Error())
		case errors.Is(err, storage.ErrResourceVersionTooLarge):
			return tooLargeResourceVersion()
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return apierrors.NewTimeoutError(err.Error(), retryAfterSeconds)
		}
		if unavailable := storageUnavailable(err); unavailable != nil {
			return unavailable
		}
		return apierrors.NewInternalError(err)
	}
	switch se.Code {
	case storage.ErrCodeKeyNotFound:
		return apierrors.NewNotFound(e.Resource, name)
	case storage.ErrCodeKeyExists:
		return apierrors.NewAlreadyExists(e.Resource, name)
	case storage.ErrCodeResourceVersionConflicts:
		return apierrors.NewConflict(e.Resource, name, errors.New(registryConflictMessage))
	case storage.ErrCodeInvalidObj:
		return apierrors.NewConflict(e.Resource, name, errors.New(se.AdditionalErrorMsg))
	case storage.ErrCodeResourceVersionTooOld:
		return apierrors.NewResourceExpired(se.AdditionalErrorMsg)
	}
	return apierrors.NewInternalError(err)
}

// tooLargeResourceVersion is kube's storage.NewTooLargeResourceVersionError as a status:
// 504 Timeout with the cause ResourceVersionTooLarge, which client-go's reflector treats
// like 410 and relists.
func tooLargeResourceVersion() error {
	err := apierrors.NewTimeoutError("Too large resource version", 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// registryConflictMessage is kube's OptimisticLockErrorMsg.
const registryConflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

func (e *Store) groupKind() schema.GroupKind {
	return schema.GroupKind{Group: e.Resource.Group, Kind: e.Kind}
}

// retryAfterSeconds is the Retry-After a client gets when etcd cannot answer now.
const retryAfterSeconds = 1

// storageUnavailable maps an error that says etcd cannot be reached or has no leader
// right now (gRPC Unavailable or DeadlineExceeded: a restart, a pause, a partition) to
// 503 ServiceUnavailable or 504 Timeout with Retry-After, so that clients retry (client-go
// does, on a 5xx with Retry-After) instead of taking a 500 for a passing outage. Other
// errors give nil.
func storageUnavailable(err error) error {
	code := codes.OK
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	switch code {
	case codes.Unavailable:
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: "storage is unavailable: " + err.Error(), Details: &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds},
		}}
	case codes.DeadlineExceeded:
		return apierrors.NewTimeoutError("storage did not answer in time: "+err.Error(), retryAfterSeconds)
	}
	return nil
}

// Subresource narrows e to what a subresource of its objects serves, such as
// pods/status: get, update and patch of the parent object under e's strategy, as kube's
// StatusREST offers. Discovery then lists those verbs only, and a create, delete, list
// or watch of the subresource is 405 MethodNotAllowed.
func (e *Store) Subresource() rest.Storage { return subresourceStore{e} }

// subresourceParent is what a subresource serves of its parent resource's storage (a
// Store, or a View of one in another version).
type subresourceParent interface {
	New() runtime.Object
	rest.Getter
	rest.Updater
	rest.TableConvertor
	GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
}

// subresourceStore is what Store.Subresource and View.Subresource return: the parent's
// get, update (and so patch), reset fields and Table, nothing else.
type subresourceStore struct{ parent subresourceParent }

var (
	_ rest.Getter         = subresourceStore{}
	_ rest.Updater        = subresourceStore{}
	_ rest.TableConvertor = subresourceStore{}
)

func (s subresourceStore) New() runtime.Object { return s.parent.New() }

func (s subresourceStore) Get(ctx context.Context, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	return s.parent.Get(ctx, namespace, name, opts)
}

func (s subresourceStore) Update(ctx context.Context, namespace, name string, objInfo rest.UpdatedObjectInfo, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return s.parent.Update(ctx, namespace, name, objInfo, opts)
}

// GetResetFields are the strategy's, for server-side apply.
func (s subresourceStore) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return s.parent.GetResetFields()
}

func (s subresourceStore) ConvertToTable(ctx context.Context, obj runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error) {
	return s.parent.ConvertToTable(ctx, obj, opts)
}
