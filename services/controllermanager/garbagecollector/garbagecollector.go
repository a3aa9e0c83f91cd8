// Package garbagecollector is kube-controller-manager's garbage collector: it keeps a
// graph of ownerReferences from informers and deletes objects whose owners are all gone
// (background propagation), orphans the dependents of an owner deleted with the
// "orphan" finalizer (removes their references, then the finalizer), and carries out
// foreground deletion: an owner with the "foregroundDeletion" finalizer waits until its
// dependents with blockOwnerDeletion are deleted (dependents with dependents of their
// own are deleted in the foreground too), then loses the finalizer and goes. Mirrors
// k8s.io/kubernetes/pkg/controller/garbagecollector.
//
// kube watches every resource through the metadata client; skiff watches, through typed
// informers, the resources it serves that take part in ownership: pods,
// persistentvolumeclaims (a StatefulSet's, under its retention policy),
// replicationcontrollers, replicasets, deployments, statefulsets, daemonsets,
// controllerrevisions, jobs and cronjobs. Owners of other kinds are looked up when a dependent needs them
// (nodes, as owners of mirror pods); a kind the collector cannot look up counts as a
// live owner, so nothing is deleted for want of knowledge.
package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/controllerref"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "garbage-collector-controller"

// resource is one kind the collector can look up, delete and patch: a built-in kind
// through its typed REST client, or a custom resource through the dynamic client.
type resource struct {
	gvk        schema.GroupVersionKind
	name       string // plural, in URLs
	namespaced bool
	client     rest.Interface
	// dynamic, for custom resources, replaces client: no strategic merge patch.
	dynamic dynamic.NamespaceableResourceInterface
}

func (r resource) scoped(namespace string) dynamic.ResourceInterface {
	if r.namespaced {
		return r.dynamic.Namespace(namespace)
	}
	return r.dynamic
}

// GarbageCollector is the garbage collector.
type GarbageCollector struct {
	graph           graph
	resourcesMu     sync.RWMutex
	resources       map[schema.GroupVersionKind]resource
	custom          *customResources // nil: built-in kinds only
	synced          []cache.InformerSynced
	attemptToDelete workqueue.TypedRateLimitingInterface[*node]
	attemptToOrphan workqueue.TypedRateLimitingInterface[*node]
	recorder        record.EventRecorder
	log             *slog.Logger
}

// New builds the collector over the factory's Pod, PersistentVolumeClaim, ReplicationController, ReplicaSet,
// Deployment, StatefulSet, DaemonSet, ControllerRevision, Job and CronJob informers.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *GarbageCollector {
	gc := &GarbageCollector{
		graph:     graph{uidToNode: map[types.UID]*node{}},
		resources: map[schema.GroupVersionKind]resource{},
		attemptToDelete: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[*node](),
			workqueue.TypedRateLimitingQueueConfig[*node]{Name: "garbage_collector_attempt_to_delete"}),
		attemptToOrphan: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[*node](),
			workqueue.TypedRateLimitingQueueConfig[*node]{Name: "garbage_collector_attempt_to_orphan"}),
		recorder: recorder,
		log:      slog.With("controller", Name),
	}
	core, apps, batch := client.CoreV1().RESTClient(), client.AppsV1().RESTClient(), client.BatchV1().RESTClient()
	for _, r := range []resource{
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, name: "pods", namespaced: true, client: core},
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "Node"}, name: "nodes", client: core},
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, name: "persistentvolumeclaims", namespaced: true, client: core},
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}, name: "replicationcontrollers", namespaced: true, client: core},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, name: "replicasets", namespaced: true, client: apps},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, name: "deployments", namespaced: true, client: apps},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, name: "statefulsets", namespaced: true, client: apps},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, name: "daemonsets", namespaced: true, client: apps},
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ControllerRevision"}, name: "controllerrevisions", namespaced: true, client: apps},
		{gvk: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, name: "jobs", namespaced: true, client: batch},
		{gvk: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, name: "cronjobs", namespaced: true, client: batch},
	} {
		gc.resources[r.gvk] = r
	}
	for _, m := range []struct {
		gvk      schema.GroupVersionKind
		informer cache.SharedIndexInformer
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, factory.Core().V1().Pods().Informer()},
		{schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, factory.Core().V1().PersistentVolumeClaims().Informer()},
		{schema.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}, factory.Core().V1().ReplicationControllers().Informer()},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, factory.Apps().V1().ReplicaSets().Informer()},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, factory.Apps().V1().Deployments().Informer()},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, factory.Apps().V1().StatefulSets().Informer()},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, factory.Apps().V1().DaemonSets().Informer()},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ControllerRevision"}, factory.Apps().V1().ControllerRevisions().Informer()},
		{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, factory.Batch().V1().Jobs().Informer()},
		{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, factory.Batch().V1().CronJobs().Informer()},
	} {
		gvk := m.gvk
		_, _ = m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { gc.observe(gvk, obj) },
			UpdateFunc: func(_, obj interface{}) { gc.observe(gvk, obj) },
			DeleteFunc: func(obj interface{}) { gc.forget(obj) },
		})
		gc.synced = append(gc.synced, m.informer.HasSynced)
	}
	return gc
}

// Run waits for the informers, then runs workers on each queue until ctx ends.
func (gc *GarbageCollector) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer gc.attemptToDelete.ShutDown()
	defer gc.attemptToOrphan.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), gc.synced...) {
		return
	}
	var wg sync.WaitGroup
	if gc.custom != nil {
		wg.Add(1)
		go func() { defer wg.Done(); gc.runCustomResources(ctx) }()
	}
	for i := 0; i < workers; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); wait.UntilWithContext(ctx, gc.runAttemptToDeleteWorker, time.Second) }()
		go func() { defer wg.Done(); wait.UntilWithContext(ctx, gc.runAttemptToOrphanWorker, time.Second) }()
	}
	<-ctx.Done()
	gc.attemptToDelete.ShutDown()
	gc.attemptToOrphan.ShutDown()
	wg.Wait()
}

// observe records an added or updated object in the graph and queues what its state
// calls for. Mirrors GraphBuilder.processGraphChanges for add and update events.
func (gc *GarbageCollector) observe(gvk schema.GroupVersionKind, obj interface{}) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	identity := objectReference{
		OwnerReference: metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: m.GetName(), UID: m.GetUID()},
		Namespace:      m.GetNamespace(),
	}
	g := &gc.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.uidToNode[m.GetUID()]
	if !ok {
		n = &node{identity: identity, dependents: map[*node]struct{}{}}
		g.uidToNode[identity.UID] = n
		n.owners = m.GetOwnerReferences()
		gc.addDependentToOwners(n, n.owners)
	} else {
		n.identity, n.virtual = identity, false
		gc.updateOwners(n, m.GetOwnerReferences())
	}
	n.beingDeleted = m.GetDeletionTimestamp() != nil
	if !n.beingDeleted {
		return
	}
	if slices.Contains(m.GetFinalizers(), metav1.FinalizerOrphanDependents) {
		gc.attemptToOrphan.Add(n)
	}
	if slices.Contains(m.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		n.deletingDependents = true
		for dep := range n.dependents {
			gc.attemptToDelete.Add(dep)
		}
		gc.attemptToDelete.Add(n)
	}
}

// addDependentToOwners links n under each owner, making virtual nodes for owners not
// seen yet and queueing them to be checked. Call with mu held.
func (gc *GarbageCollector) addDependentToOwners(n *node, owners []metav1.OwnerReference) {
	for _, ref := range owners {
		owner, ok := gc.graph.uidToNode[ref.UID]
		if !ok {
			owner = &node{
				identity:   objectReference{OwnerReference: coordinates(ref), Namespace: n.identity.Namespace},
				dependents: map[*node]struct{}{},
				virtual:    true,
			}
			gc.graph.uidToNode[ref.UID] = owner
			gc.attemptToDelete.Add(owner)
		}
		owner.dependents[n] = struct{}{}
	}
}

// updateOwners applies a change of n's ownerReferences; an owner that lost a blocking
// dependent and waits for its dependents is queued, as it may be done. Call with mu
// held.
func (gc *GarbageCollector) updateOwners(n *node, owners []metav1.OwnerReference) {
	before := map[types.UID]metav1.OwnerReference{}
	for _, ref := range n.owners {
		before[ref.UID] = ref
	}
	var added []metav1.OwnerReference
	for _, ref := range owners {
		old, had := before[ref.UID]
		delete(before, ref.UID)
		if !had {
			added = append(added, ref)
			continue
		}
		if ptr.Deref(old.BlockOwnerDeletion, false) && !ptr.Deref(ref.BlockOwnerDeletion, false) {
			gc.wakeOwner(ref.UID)
		}
	}
	n.owners = owners
	gc.addDependentToOwners(n, added)
	for uid := range before {
		if owner, ok := gc.graph.uidToNode[uid]; ok {
			delete(owner.dependents, n)
		}
		gc.wakeOwner(uid)
	}
}

// wakeOwner queues the owner uid if it waits for its dependents. Call with mu held.
func (gc *GarbageCollector) wakeOwner(uid types.UID) {
	if owner, ok := gc.graph.uidToNode[uid]; ok && owner.deletingDependents {
		gc.attemptToDelete.Add(owner)
	}
}

// forget removes a deleted object from the graph: its dependents lost an owner and are
// queued; owners waiting on it are woken. Mirrors processGraphChanges for deletes.
func (gc *GarbageCollector) forget(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	g := &gc.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.uidToNode[m.GetUID()]
	if !ok {
		return
	}
	gc.removeNode(n)
	for dep := range n.dependents {
		gc.attemptToDelete.Add(dep)
	}
	for _, ref := range n.owners {
		gc.wakeOwner(ref.UID)
	}
}

// removeNode unlinks n. Call with mu held.
func (gc *GarbageCollector) removeNode(n *node) {
	delete(gc.graph.uidToNode, n.identity.UID)
	for _, ref := range n.owners {
		if owner, ok := gc.graph.uidToNode[ref.UID]; ok {
			delete(owner.dependents, n)
		}
	}
}

func coordinates(ref metav1.OwnerReference) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
}

func (gc *GarbageCollector) runAttemptToDeleteWorker(ctx context.Context) {
	for {
		n, quit := gc.attemptToDelete.Get()
		if quit {
			return
		}
		if err := gc.attemptToDeleteItem(ctx, n); err != nil {
			gc.log.Info("attempt to delete failed; will retry", "object", n.identity, "err", err)
			gc.attemptToDelete.AddRateLimited(n)
		} else {
			gc.attemptToDelete.Forget(n)
		}
		gc.attemptToDelete.Done(n)
	}
}

func (gc *GarbageCollector) runAttemptToOrphanWorker(ctx context.Context) {
	for {
		n, quit := gc.attemptToOrphan.Get()
		if quit {
			return
		}
		if err := gc.orphanDependents(ctx, n); err != nil {
			gc.log.Info("orphaning failed; will retry", "owner", n.identity, "err", err)
			gc.attemptToOrphan.AddRateLimited(n)
		} else {
			gc.attemptToOrphan.Forget(n)
		}
		gc.attemptToOrphan.Done(n)
	}
}

// errUnknownKind: the collector cannot look this kind up.
var errUnknownKind = fmt.Errorf("kind not known to the garbage collector")

// resourceFor finds the resource of apiVersion/kind.
func (gc *GarbageCollector) resourceFor(apiVersion, kind string) (resource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return resource{}, err
	}
	gc.resourcesMu.RLock()
	r, ok := gc.resources[gv.WithKind(kind)]
	gc.resourcesMu.RUnlock()
	if !ok {
		return resource{}, errUnknownKind
	}
	return r, nil
}

// get reads the live object ref names (in namespace, for namespaced kinds).
func (gc *GarbageCollector) get(ctx context.Context, r resource, namespace, name string) (metav1.Object, error) {
	if !r.namespaced {
		namespace = ""
	}
	if r.dynamic != nil {
		return r.scoped(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	obj, err := r.client.Get().NamespaceIfScoped(namespace, r.namespaced).Resource(r.name).Name(name).Do(ctx).Get()
	if err != nil {
		return nil, err
	}
	return meta.Accessor(obj)
}

// attemptToDeleteItem decides about one object: waits or finishes its foreground
// deletion, drops references to owners that are gone, or deletes it when it has no
// live owner left. Mirrors GarbageCollector.attemptToDeleteItem.
func (gc *GarbageCollector) attemptToDeleteItem(ctx context.Context, n *node) error {
	gc.graph.mu.Lock()
	identity, virtual := n.identity, n.virtual
	skip := !virtual && n.beingDeleted && !n.deletingDependents
	gc.graph.mu.Unlock()
	if skip {
		return nil // its own deletion is under way; nothing waits on the collector
	}
	r, err := gc.resourceFor(identity.APIVersion, identity.Kind)
	if err == errUnknownKind {
		if gc.mayBeCustomResource(identity.APIVersion) {
			// Discovery may not have listed it yet (a new CRD): look again later, as
			// kube's collector requeues an object whose kind it cannot map.
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	latest, err := gc.get(ctx, r, identity.Namespace, identity.Name)
	switch {
	case apierrors.IsNotFound(err), err == nil && latest.GetUID() != identity.UID:
		if virtual {
			gc.absentOwner(n)
		}
		return nil
	case err != nil:
		return err
	}
	if latest.GetDeletionTimestamp() != nil && slices.Contains(latest.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		return gc.processDeletingDependentsItem(ctx, n, r, latest)
	}
	refs := latest.GetOwnerReferences()
	if len(refs) == 0 {
		return nil
	}
	solid, dangling, waiting, err := gc.classifyReferences(ctx, latest.GetNamespace(), refs)
	if err != nil {
		return err
	}
	gc.graph.mu.Lock()
	hasDependents := len(n.dependents) > 0
	dependentDeletingDependents := false
	for dep := range n.dependents {
		dependentDeletingDependents = dependentDeletingDependents || dep.deletingDependents
	}
	gc.graph.mu.Unlock()
	switch {
	case len(solid) != 0:
		if len(dangling) == 0 && len(waiting) == 0 {
			return nil
		}
		// A live owner keeps the object; forget the owners that are gone or going.
		for _, ref := range append(dangling, waiting...) {
			if err := gc.releaseOwner(ctx, r, latest.GetNamespace(), latest.GetName(), latest.GetUID(), ref.UID); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	case len(waiting) != 0 && hasDependents:
		// An owner is deleted in the foreground and this object has dependents of its
		// own: they go first, so this one is deleted in the foreground too. If one of
		// them already waits for its own dependents, the owners may be waiting in a
		// circle (pod1 owns pod2 owns pod3 owns pod1): this object stops blocking its
		// owners first, so the circle unwinds, as kube's collector does (with its
		// false positives: an owner may then go before this object).
		if dependentDeletingDependents {
			if err := gc.unblockOwners(ctx, r, latest); err != nil {
				return err
			}
		}
		return gc.deleteObject(ctx, r, latest, metav1.DeletePropagationForeground)
	default:
		policy := metav1.DeletePropagationBackground
		switch {
		case slices.Contains(latest.GetFinalizers(), metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case slices.Contains(latest.GetFinalizers(), metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		return gc.deleteObject(ctx, r, latest, policy)
	}
}

// absentOwner removes a virtual node whose object does not exist and queues its
// dependents, which have lost that owner.
func (gc *GarbageCollector) absentOwner(n *node) {
	gc.graph.mu.Lock()
	defer gc.graph.mu.Unlock()
	if current, ok := gc.graph.uidToNode[n.identity.UID]; !ok || current != n || !n.virtual {
		return
	}
	gc.removeNode(n)
	for dep := range n.dependents {
		gc.attemptToDelete.Add(dep)
	}
}

// classifyReferences sorts an object's owners into solid (live), dangling (gone, or
// replaced by another object of that name) and waiting (being deleted in the
// foreground). Mirrors classifyReferences.
func (gc *GarbageCollector) classifyReferences(ctx context.Context, namespace string, refs []metav1.OwnerReference) (solid, dangling, waiting []metav1.OwnerReference, err error) {
	for _, ref := range refs {
		r, err := gc.resourceFor(ref.APIVersion, ref.Kind)
		if err == errUnknownKind {
			solid = append(solid, ref)
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		owner, err := gc.get(ctx, r, namespace, ref.Name)
		switch {
		case apierrors.IsNotFound(err), err == nil && owner.GetUID() != ref.UID:
			dangling = append(dangling, ref)
		case err != nil:
			return nil, nil, nil, err
		case owner.GetDeletionTimestamp() != nil && slices.Contains(owner.GetFinalizers(), metav1.FinalizerDeleteDependents):
			waiting = append(waiting, ref)
		default:
			solid = append(solid, ref)
		}
	}
	return solid, dangling, waiting, nil
}

// processDeletingDependentsItem finishes a foreground deletion once no dependent blocks
// it, and otherwise makes sure the blocking dependents are being deleted. Mirrors
// processDeletingDependentsItem.
func (gc *GarbageCollector) processDeletingDependentsItem(ctx context.Context, n *node, r resource, latest metav1.Object) error {
	gc.graph.mu.Lock()
	n.deletingDependents = true
	blocking := n.blockingDependents()
	gc.graph.mu.Unlock()
	if len(blocking) == 0 {
		return gc.removeFinalizer(ctx, r, latest, metav1.FinalizerDeleteDependents)
	}
	gc.graph.mu.Lock()
	defer gc.graph.mu.Unlock()
	for _, dep := range blocking {
		if !dep.deletingDependents {
			gc.attemptToDelete.Add(dep)
		}
	}
	return nil
}

// orphanDependents removes the owner's reference from each dependent, then the owner's
// "orphan" finalizer, which lets the owner's deletion finish. Mirrors
// attemptToOrphanWorker.
func (gc *GarbageCollector) orphanDependents(ctx context.Context, owner *node) error {
	gc.graph.mu.Lock()
	identity := owner.identity
	dependents := owner.dependentsSnapshot()
	gc.graph.mu.Unlock()
	for _, dep := range dependents {
		gc.graph.mu.Lock()
		depIdentity := dep.identity
		gc.graph.mu.Unlock()
		r, err := gc.resourceFor(depIdentity.APIVersion, depIdentity.Kind)
		if err != nil {
			continue
		}
		err = gc.releaseOwner(ctx, r, depIdentity.Namespace, depIdentity.Name, depIdentity.UID, identity.UID)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("orphan %s %s/%s: %w", depIdentity.Kind, depIdentity.Namespace, depIdentity.Name, err)
		}
	}
	r, err := gc.resourceFor(identity.APIVersion, identity.Kind)
	if err != nil {
		return nil
	}
	latest, err := gc.get(ctx, r, identity.Namespace, identity.Name)
	if apierrors.IsNotFound(err) || (err == nil && latest.GetUID() != identity.UID) {
		return nil
	}
	if err != nil {
		return err
	}
	return gc.removeFinalizer(ctx, r, latest, metav1.FinalizerOrphanDependents)
}

// removeFinalizer takes finalizer off the object, retrying conflicts with a fresh read;
// the update that removes the last finalizer of a deleted object deletes it.
func (gc *GarbageCollector) removeFinalizer(ctx context.Context, r resource, obj metav1.Object, finalizer string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			return nil
		}
		kept := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == finalizer })
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"finalizers": kept, "resourceVersion": obj.GetResourceVersion(), "uid": obj.GetUID(),
		}})
		var err error
		if r.dynamic != nil {
			_, err = r.scoped(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			err = r.client.Patch(types.MergePatchType).NamespaceIfScoped(obj.GetNamespace(), r.namespaced).
				Resource(r.name).Name(obj.GetName()).Body(patch).Do(ctx).Error()
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) {
			fresh, gerr := gc.get(ctx, r, obj.GetNamespace(), obj.GetName())
			if gerr != nil {
				if apierrors.IsNotFound(gerr) {
					return nil
				}
				return gerr
			}
			if fresh.GetUID() != obj.GetUID() {
				return nil
			}
			obj = fresh
		}
		return err
	})
}

// deleteObject deletes obj (its uid as precondition) with policy.
func (gc *GarbageCollector) deleteObject(ctx context.Context, r resource, obj metav1.Object, policy metav1.DeletionPropagation) error {
	uid := obj.GetUID()
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy}
	var err error
	if r.dynamic != nil {
		err = r.scoped(obj.GetNamespace()).Delete(ctx, obj.GetName(), opts)
	} else {
		err = r.client.Delete().NamespaceIfScoped(obj.GetNamespace(), r.namespaced).Resource(r.name).Name(obj.GetName()).Body(&opts).Do(ctx).Error()
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced by a namesake that is not ours to delete
	}
	if err == nil {
		gc.log.Debug("deleted", "kind", r.gvk.Kind, "object", obj.GetNamespace()+"/"+obj.GetName(), "propagation", policy)
	}
	return err
}

// unblockOwners sets blockOwnerDeletion false on every reference of obj that blocks its
// owner's foreground deletion: a strategic merge patch on the references' uids for
// built-in kinds, a JSON merge patch of the whole list at the read resourceVersion for
// custom resources. Mirrors unblockOwnerReferencesStrategicMergePatch.
func (gc *GarbageCollector) unblockOwners(ctx context.Context, r resource, obj metav1.Object) error {
	refs := slices.Clone(obj.GetOwnerReferences())
	var blocking []metav1.OwnerReference
	for i := range refs {
		if ptr.Deref(refs[i].BlockOwnerDeletion, false) {
			refs[i].BlockOwnerDeletion = ptr.To(false)
			blocking = append(blocking, refs[i])
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	meta := map[string]any{"uid": obj.GetUID(), "ownerReferences": blocking}
	patchType := types.StrategicMergePatchType
	if r.dynamic != nil {
		meta["ownerReferences"], meta["resourceVersion"] = refs, obj.GetResourceVersion()
		patchType = types.MergePatchType
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	var err error
	if r.dynamic != nil {
		_, err = r.scoped(obj.GetNamespace()).Patch(ctx, obj.GetName(), patchType, patch, metav1.PatchOptions{})
	} else {
		err = r.client.Patch(patchType).NamespaceIfScoped(obj.GetNamespace(), r.namespaced).
			Resource(r.name).Name(obj.GetName()).Body(patch).Do(ctx).Error()
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// releaseOwner removes the reference to owner from the object namespace/name (whose uid
// must still be dependent): a strategic merge patch deleting that one reference for
// built-in kinds; for custom resources, which take no strategic merge patch, a JSON
// merge patch of the remaining list at the read resourceVersion (a conflict is retried
// by the queue), as kube's collector writes for them.
func (gc *GarbageCollector) releaseOwner(ctx context.Context, r resource, namespace, name string, dependent, owner types.UID) error {
	if r.dynamic == nil {
		return r.client.Patch(types.StrategicMergePatchType).NamespaceIfScoped(namespace, r.namespaced).
			Resource(r.name).Name(name).Body(controllerref.ReleasePatch(owner, dependent)).Do(ctx).Error()
	}
	latest, err := gc.get(ctx, r, namespace, name)
	if err != nil {
		return err
	}
	if latest.GetUID() != dependent {
		return nil
	}
	kept := slices.DeleteFunc(slices.Clone(latest.GetOwnerReferences()), func(ref metav1.OwnerReference) bool { return ref.UID == owner })
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": kept, "uid": dependent, "resourceVersion": latest.GetResourceVersion(),
	}})
	_, err = r.scoped(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
