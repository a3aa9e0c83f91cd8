// Package apiextensions serves the custom resources CustomResourceDefinitions declare,
// inside the apiserver: it watches CRDs, accepts their names (condition NamesAccepted)
// and establishes them (Established), builds each served version's storage (etcd
// through a watch cache, the generic Store over unstructured objects, the version's
// schema as its strategy) and publishes them to the endpoints package as a DynamicAPI,
// with discovery and OpenAPI; when a CRD is deleted it deletes its custom resources
// before letting the CRD go (the customresourcecleanup finalizer). Mirrors
// k8s.io/apiextensions-apiserver/pkg/apiserver's crdHandler and the controllers it runs
// (status naming, establishing, finalizer, discovery and OpenAPI).
package apiextensions

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"skiff.dev/services/apiserver/endpoints"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/apiextensions/customresource"
	"skiff.dev/services/apiserver/registry/apiextensions/customresourcedefinition"
	"skiff.dev/services/apiserver/registry/autoscaling/scale"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/storage"
)

// StorageFunc builds the storage of one custom resource version: objects under prefix
// (ending in "/"), encoded by codec, made by newFunc and newListFunc, of kind, selected
// by getAttrs. It returns a function that releases the storage (stops its watch cache).
type StorageFunc func(prefix string, codec runtime.Codec, newFunc, newListFunc func() runtime.Object,
	kind schema.GroupVersionKind, getAttrs storage.AttrFunc) (storage.Interface, func(), error)

// Config is what the Server needs.
type Config struct {
	// Stores finds the customresourcedefinitions Store, which the Server lists and
	// watches in process and writes CRD status and finalizers through.
	Stores registry.Stores
	// NewStorage builds each custom resource version's storage.
	NewStorage StorageFunc
	// ServiceResolver finds where a conversion webhook's Service is served.
	ServiceResolver webhook.ServiceResolver
	// TracerProvider traces conversion webhook calls; nil means the global provider.
	TracerProvider trace.TracerProvider
}

// Server serves custom resources; it implements endpoints.DynamicAPI. Build it with New
// and Run it.
type Server struct {
	cfg        Config
	converters *conversion.CRConverterFactory
	informer   cache.SharedIndexInformer
	queue      workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	served map[string]*servedCRD // by CRD name

	current atomic.Pointer[snapshot]
}

// servedCRD is one CRD being served: a snapshot of it and its versions' storage.
type servedCRD struct {
	crd         *apiextensionsv1.CustomResourceDefinition
	versions    []servedVersion // in discovery's priority order
	storage     *registry.Store // the storage version's Store, for cleanup
	terminating atomic.Bool
	release     []func()
}

type servedVersion struct {
	name     string
	resource endpoints.Resource
}

// snapshot is what the DynamicAPI methods answer, rebuilt on each change.
type snapshot struct {
	groups []endpoints.DynamicGroup
	v3     map[string][]byte
	v2     *spec.Swagger
	name   string
}

var _ endpoints.DynamicAPI = (*Server)(nil)

var crdResource = apiextensionsv1.Resource("customresourcedefinitions")

// New builds a Server over cfg; nothing is served until Run has synced the CRDs.
// Errors: the conversion webhook client cannot be built.
func New(cfg Config) (*Server, error) {
	converters, err := newConverterFactory(cfg.ServiceResolver, cfg.TracerProvider)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, served: map[string]*servedCRD{}, converters: converters,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "crd_apiextensions"}),
	}
	s.current.Store(&snapshot{name: "0"})
	s.informer = cache.NewSharedIndexInformer(&registry.ListWatch{Stores: cfg.Stores, Resource: crdResource},
		&apiextensionsv1.CustomResourceDefinition{}, 0, cache.Indexers{})
	enqueue := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return s, nil
}

// Run watches CRDs and serves theirs until ctx ends, then releases every storage.
func (s *Server) Run(ctx context.Context) {
	defer s.queue.ShutDown()
	go s.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, served := range s.served {
		served.stop()
		delete(s.served, name)
	}
}

func (s *Server) processNext(ctx context.Context) bool {
	name, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(name)
	if err := s.sync(ctx, name); err != nil {
		if _, ok := err.(errRequeue); ok {
			s.queue.AddAfter(name, time.Second)
			return true
		}
		if ctx.Err() == nil {
			slog.Warn("syncing CustomResourceDefinition; will retry", "crd", name, "err", err)
		}
		s.queue.AddRateLimited(name)
		return true
	}
	s.queue.Forget(name)
	return true
}

// errRequeue asks for another sync later without logging a failure.
type errRequeue struct{ reason string }

func (e errRequeue) Error() string { return e.reason }

// sync brings name's serving in line with its CRD: names and conditions first, then
// the cleanup of a deleted CRD, then its storage once Established.
func (s *Server) sync(ctx context.Context, name string) error {
	obj, exists, err := s.informer.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		s.unserve(name)
		return nil
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	if crd.DeletionTimestamp == nil {
		if updated, err := s.updateNames(ctx, crd); err != nil || updated {
			return err // the write brings the CRD back through the informer
		}
	}
	if crd.DeletionTimestamp != nil {
		s.mu.Lock()
		if served := s.served[name]; served != nil {
			served.terminating.Store(true)
		}
		s.mu.Unlock()
		if customresourcedefinition.HasFinalizer(crd) {
			return s.cleanup(ctx, crd)
		}
		return nil
	}
	if customresourcedefinition.IsEstablished(crd) {
		return s.serve(crd)
	}
	return nil
}

// updateNames computes the accepted names and the NamesAccepted and Established
// conditions, and writes them when they changed. Mirrors the apiextensions
// NamingConditionController and EstablishingController.
func (s *Server) updateNames(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	want := crd.DeepCopy()
	accepted, cond := s.acceptNames(crd)
	want.Status.AcceptedNames = accepted
	customresourcedefinition.SetCondition(want, cond)
	if cond.Status == apiextensionsv1.ConditionTrue && !customresourcedefinition.IsEstablished(crd) {
		customresourcedefinition.SetCondition(want, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
			Reason: "InitialNamesAccepted", Message: "the initial names have been accepted",
		})
	}
	if equalStatus(crd.Status, want.Status) {
		return false, nil
	}
	status := s.cfg.Stores.Store(crdResource).WithStrategy(customresourcedefinition.StatusStrategy{})
	_, _, err := status.Update(ctx, "", crd.Name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		current := old.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition)
		if current.UID != crd.UID {
			return nil, apierrors.NewConflict(crdResource, crd.Name, fmt.Errorf("the CRD was replaced"))
		}
		current.Status.AcceptedNames = want.Status.AcceptedNames
		for _, c := range want.Status.Conditions {
			customresourcedefinition.SetCondition(current, c)
		}
		return current, nil
	}), &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return true, err
}

// equalStatus compares accepted names and conditions' types, statuses, reasons and
// messages (not their times).
func equalStatus(a, b apiextensionsv1.CustomResourceDefinitionStatus) bool {
	an, _ := json.Marshal(a.AcceptedNames)
	bn, _ := json.Marshal(b.AcceptedNames)
	if string(an) != string(bn) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}

// acceptNames returns the names crd may use and its NamesAccepted condition: its
// requested names, unless another CRD of its group has accepted one of them, in which
// case the names accepted before stay. Mirrors calculateNamesAndConditions.
func (s *Server) acceptNames(crd *apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition) {
	resources, kinds := sets.New[string](), sets.New[string]()
	for _, obj := range s.informer.GetStore().List() {
		other := obj.(*apiextensionsv1.CustomResourceDefinition)
		if other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		n := other.Status.AcceptedNames
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	requested := crd.Spec.Names
	var conflict string
	switch {
	case resources.Has(requested.Plural):
		conflict = fmt.Sprintf("%q is already in use", requested.Plural)
	case resources.Has(requested.Singular):
		conflict = fmt.Sprintf("%q is already in use", requested.Singular)
	case kinds.Has(requested.Kind):
		conflict = fmt.Sprintf("%q is already in use", requested.Kind)
	case kinds.Has(requested.ListKind):
		conflict = fmt.Sprintf("%q is already in use", requested.ListKind)
	}
	for _, short := range requested.ShortNames {
		if conflict == "" && resources.Has(short) {
			conflict = fmt.Sprintf("%q is already in use", short)
		}
	}
	if conflict != "" {
		reason := "ConflictingNames"
		return crd.Status.AcceptedNames, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse, Reason: reason, Message: conflict}
	}
	return requested, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"}
}

// serve builds crd's storage unless the same generation is served already.
func (s *Server) serve(crd *apiextensionsv1.CustomResourceDefinition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.served[crd.Name]; old != nil && old.crd.UID == crd.UID && old.crd.Generation == crd.Generation &&
		equalNames(old.crd.Status.AcceptedNames, crd.Status.AcceptedNames) {
		return nil
	}
	served, err := s.build(crd.DeepCopy())
	if err != nil {
		return err
	}
	if old := s.served[crd.Name]; old != nil {
		old.stop()
	}
	s.served[crd.Name] = served
	s.publish()
	return nil
}

func equalNames(a, b apiextensionsv1.CustomResourceDefinitionNames) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// unserve stops serving name.
func (s *Server) unserve(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if served := s.served[name]; served != nil {
		served.stop()
		delete(s.served, name)
		s.publish()
	}
}

func (c *servedCRD) stop() {
	for _, release := range c.release {
		release()
	}
}

// build makes the storage of every served version of crd. Errors: a version's schema
// or printer columns do not build, or its storage does not start.
func (s *Server) build(crd *apiextensionsv1.CustomResourceDefinition) (_ *servedCRD, err error) {
	served := &servedCRD{crd: crd}
	defer func() {
		if err != nil {
			served.stop()
		}
	}()
	names := crd.Status.AcceptedNames
	gr := schema.GroupResource{Group: crd.Spec.Group, Resource: names.Plural}
	prefix := "/registry/" + crd.Spec.Group + "/" + names.Plural
	_, converter, err := s.converters.NewConverter(crd)
	if err != nil {
		return nil, fmt.Errorf("converter of %s: %w", crd.Name, err)
	}
	storageVersion := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storageVersion = v.Name
		}
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		strategy, err := customresource.NewStrategy(crd, v.Name)
		if err != nil {
			return nil, err
		}
		kind := strategy.Kind()
		listKind := kind.GroupVersion().WithKind(names.ListKind)
		newFunc := func() runtime.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(kind)
			return u
		}
		newListFunc := func() runtime.Object {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listKind)
			return l
		}
		codec := customResourceCodec{storage: schema.GroupVersion{Group: crd.Spec.Group, Version: storageVersion},
			served: kind.GroupVersion(), strategy: strategy, converter: converter}
		st, release, err := s.cfg.NewStorage(prefix+"/", codec, newFunc, newListFunc, kind, strategy.GetAttrs)
		if err != nil {
			return nil, fmt.Errorf("storage of %s/%s: %w", crd.Name, v.Name, err)
		}
		served.release = append(served.release, release)
		store := &registry.Store{NewFunc: newFunc, NewListFunc: newListFunc, Resource: gr, Kind: names.Kind,
			KeyRoot: prefix, Strategy: strategy, Storage: st}
		if v.Name == storageVersion {
			served.storage = store
		}
		fields := &fieldManagers{crd: crd, kind: kind}
		resource := endpoints.Resource{Name: names.Plural, SingularName: names.Singular, Kind: names.Kind,
			ShortNames: names.ShortNames, Categories: names.Categories, Namespaced: strategy.NamespaceScoped(),
			Storage: &customResourceREST{Store: store, strategy: strategy, terminating: served.terminating.Load, fields: fields},
		}
		if strategy.HasStatus() {
			resource.Subresources = map[string]endpoints.Subresource{
				"status": {Kind: names.Kind, Storage: &statusREST{subresource: store.WithStrategy(customresource.StatusStrategy{Strategy: strategy}).Subresource().(subresource), fields: fields}},
			}
		}
		if strategy.Scale() != nil {
			if resource.Subresources == nil {
				resource.Subresources = map[string]endpoints.Subresource{}
			}
			resource.Subresources["scale"] = endpoints.Subresource{Kind: "Scale", Storage: &scale.REST{Store: store, Scalable: strategy}}
		}
		served.versions = append(served.versions, servedVersion{name: v.Name, resource: resource})
	}
	if served.storage == nil && len(served.versions) > 0 {
		// The storage version is not served: cleanup still needs a Store of it.
		served.storage = served.versions[0].resource.Storage.(*customResourceREST).Store
	}
	sort.SliceStable(served.versions, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(served.versions[i].name, served.versions[j].name) > 0
	})
	return served, nil
}

// publish rebuilds the snapshot the DynamicAPI answers from. s.mu is held.
func (s *Server) publish() {
	byGroup := map[string]map[string][]endpoints.Resource{} // group → version → resources
	priority := map[string][]string{}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, served := range s.served {
		crds = append(crds, served.crd)
		g := served.crd.Spec.Group
		if byGroup[g] == nil {
			byGroup[g] = map[string][]endpoints.Resource{}
		}
		for _, v := range served.versions {
			if _, ok := byGroup[g][v.name]; !ok {
				priority[g] = append(priority[g], v.name)
			}
			byGroup[g][v.name] = append(byGroup[g][v.name], v.resource)
		}
	}
	next := &snapshot{v3: map[string][]byte{}, name: strconv.FormatInt(time.Now().UnixNano(), 36)}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		versions := priority[g]
		sort.SliceStable(versions, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(versions[i], versions[j]) > 0 })
		dg := endpoints.DynamicGroup{Name: g}
		for _, v := range versions {
			resources := byGroup[g][v]
			sort.Slice(resources, func(i, j int) bool { return resources[i].Name < resources[j].Name })
			dg.Versions = append(dg.Versions, endpoints.NewAPIGroupVersion(schema.GroupVersion{Group: g, Version: v}, resources))
		}
		next.groups = append(next.groups, dg)
	}
	sort.Slice(crds, func(i, j int) bool { return crds[i].Name < crds[j].Name })
	next.v3, next.v2 = openAPIDocuments(crds)
	s.current.Store(next)
}

// openAPIDocuments are the OpenAPI v3 documents of crds by group version path, and
// their Swagger 2.0 document; a CRD whose document does not build is left out (and
// logged): `kubectl explain` does not know it, the rest works.
func openAPIDocuments(crds []*apiextensionsv1.CustomResourceDefinition) (map[string][]byte, *spec.Swagger) {
	v3 := map[string][]*spec3.OpenAPI{}
	var v2 []*spec.Swagger
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			doc, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{V2: false})
			if err != nil {
				slog.Warn("no OpenAPI v3 document for a custom resource", "crd", crd.Name, "version", v.Name, "err", err)
				continue
			}
			path := "apis/" + crd.Spec.Group + "/" + v.Name
			v3[path] = append(v3[path], doc)
			sw, err := builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true})
			if err != nil {
				slog.Warn("no OpenAPI v2 document for a custom resource", "crd", crd.Name, "version", v.Name, "err", err)
				continue
			}
			v2 = append(v2, sw)
		}
	}
	docs := map[string][]byte{}
	for path, specs := range v3 {
		merged, err := builder.MergeSpecsV3(specs...)
		if err != nil {
			slog.Warn("merging custom resources' OpenAPI v3 documents", "path", path, "err", err)
			continue
		}
		if data, err := json.Marshal(merged); err == nil {
			docs[path] = data
		}
	}
	if len(v2) == 0 {
		return docs, nil
	}
	merged, err := builder.MergeSpecs(v2[0], v2[1:]...)
	if err != nil {
		slog.Warn("merging custom resources' OpenAPI v2 documents", "err", err)
		return docs, nil
	}
	return docs, merged
}

// Groups implements endpoints.DynamicAPI.
func (s *Server) Groups() []endpoints.DynamicGroup { return s.current.Load().groups }

// OpenAPIV3 implements endpoints.DynamicAPI.
func (s *Server) OpenAPIV3() map[string][]byte { return s.current.Load().v3 }

// OpenAPIV2 implements endpoints.DynamicAPI.
func (s *Server) OpenAPIV2() (*spec.Swagger, string) {
	c := s.current.Load()
	return c.v2, c.name
}

// cleanup deletes every custom resource of a CRD being deleted and then removes its
// finalizer, which lets the CRD go. Objects that wait on finalizers of their own keep
// the CRD until they are gone. Mirrors the apiextensions CRDFinalizer.
func (s *Server) cleanup(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	if c := customresourcedefinition.FindCondition(crd, apiextensionsv1.Terminating); c == nil || c.Reason != "InstanceDeletionInProgress" {
		status := s.cfg.Stores.Store(crdResource).WithStrategy(customresourcedefinition.StatusStrategy{})
		_, _, err := status.Update(ctx, "", crd.Name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
			current := old.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition)
			if current.UID != crd.UID {
				return nil, apierrors.NewConflict(crdResource, crd.Name, fmt.Errorf("the CRD was replaced"))
			}
			customresourcedefinition.SetCondition(current, apiextensionsv1.CustomResourceDefinitionCondition{
				Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
				Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress",
			})
			return current, nil
		}), &metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err // the write brings the CRD back through the informer
	}
	s.mu.Lock()
	var store *registry.Store
	if served := s.served[crd.Name]; served != nil && served.crd.UID == crd.UID {
		store = served.storage
	}
	s.mu.Unlock()
	if store != nil {
		list, err := store.List(ctx, "", &metainternalversion.ListOptions{})
		if err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, item := range items {
			m, _ := meta.Accessor(item)
			if m.GetDeletionTimestamp() != nil {
				continue
			}
			if _, _, err := store.Delete(ctx, m.GetNamespace(), m.GetName(), nil); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if len(items) > 0 {
			// Deleted objects go at once unless finalizers hold them; look again.
			if list, err = store.List(ctx, "", &metainternalversion.ListOptions{}); err != nil {
				return err
			}
			if remaining, _ := meta.ExtractList(list); len(remaining) > 0 {
				return errRequeue{reason: fmt.Sprintf("%d custom resources of %s wait to be deleted", len(remaining), crd.Name)}
			}
		}
	}
	crds := s.cfg.Stores.Store(crdResource)
	_, _, err := crds.Update(ctx, "", crd.Name, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		current := old.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition)
		if current.UID != crd.UID {
			return nil, apierrors.NewConflict(crdResource, crd.Name, fmt.Errorf("the CRD was replaced"))
		}
		var finalizers []string
		for _, f := range current.Finalizers {
			if f != apiextensionsv1.CustomResourceCleanupFinalizer {
				finalizers = append(finalizers, f)
			}
		}
		current.Finalizers = finalizers
		return current, nil
	}), &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
