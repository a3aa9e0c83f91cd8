package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/storage"
)

// Descriptor is everything the apiserver needs to serve one resource: its names for
// discovery and kubectl, its Go types, its strategy and how to build its REST storage.
// The apiserver keeps one list of descriptors and builds from it each resource's etcd
// store and watch cache, its routes, discovery (legacy and aggregated), OpenAPI and the
// namespace-deletion list, so adding a resource is its own package plus one line.
// It folds together what kube spreads over a RESTStorageProvider, the resource's
// StandardStorage and its discovery entry (k8s.io/kubernetes/pkg/registry/*/rest).
type Descriptor struct {
	// GroupVersion is the API group and version, e.g. {Group: "apps", Version: "v1"};
	// the core group is {Version: "v1"}.
	GroupVersion schema.GroupVersion
	// Resource is the plural name in URLs, e.g. "configmaps".
	Resource string
	// SingularName, e.g. "configmap".
	SingularName string
	// Kind, e.g. "ConfigMap".
	Kind string
	// ShortNames for kubectl, e.g. ["cm"].
	ShortNames []string
	// Categories, e.g. ["all"].
	Categories []string
	// NewFunc returns an empty object, e.g. &corev1.ConfigMap{}.
	NewFunc func() runtime.Object
	// NewListFunc returns an empty list, e.g. &corev1.ConfigMapList{}. nil means the
	// resource has no storage (reviews such as selfsubjectaccessreviews): REST is called
	// with a nil Store.
	NewListFunc func() runtime.Object
	// Strategy decides what differs per resource on the generic Store's paths; its
	// NamespaceScoped decides the URL shape, the etcd key and whether the resource's
	// objects are deleted with their namespace. Required when NewListFunc is set.
	Strategy Strategy
	// KeyRoot is the etcd prefix without a trailing slash; "" means
	// "/registry/" + Resource (kube's default, e.g. /registry/configmaps).
	KeyRoot string
	// NoWatchCache serves the resource from etcd alone, every list and watch included,
	// as kube-apiserver serves events (its DefaultWatchCacheSizes gives them none):
	// objects written often, read seldom and watched by few cost a cache's memory and a
	// decode per write for little.
	NoWatchCache bool
	// REST builds what serves the resource and its subresources from the resource's
	// generic Store; stores finds the other resources' Stores. nil means the Store alone
	// serves the resource, with no subresources.
	REST func(store *Store, stores Stores) (rest.Storage, map[string]Subresource, error)
	// StorageOf, when set, names the resource whose storage holds this one's objects:
	// no storage of its own is built, and the resource is served as a View of that
	// resource's Store (see NewView), in this descriptor's group version and kind, its
	// writes judged by this descriptor's Strategy. REST is not used. events.k8s.io/v1
	// events are served so from core/v1's: one object, two views, as kube-apiserver's
	// cohabitating resources. StorageOf may name the descriptor's own group resource:
	// then this descriptor serves another version of a resource whose storage version
	// another descriptor serves (autoscaling/v1 horizontalpodautoscalers, stored as
	// autoscaling/v2), as kube-apiserver serves every version of a resource from one
	// storage.
	StorageOf schema.GroupResource
	// ViewREST, for a descriptor with StorageOf, builds what serves the resource and its
	// subresources from its View (see View.WithStrategy and View.Subresource); nil means
	// the View alone serves the resource, with no subresources.
	ViewREST func(view *View) (rest.Storage, map[string]Subresource, error)
}

// Subresource is one subresource's storage, e.g. pods/status.
type Subresource struct {
	// Kind of the objects read and written, e.g. "Pod" for pods/status, "Binding".
	Kind string
	// Storage serves the subresource's verbs.
	Storage rest.Storage
}

// Stores finds another served resource's generic Store.
type Stores interface {
	// Store returns gr's Store, or nil when gr is not served or has no storage.
	Store(gr schema.GroupResource) *Store
}

// GroupResource is the descriptor's group and resource, e.g. {Group: "apps", Resource:
// "deployments"}.
func (d *Descriptor) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: d.GroupVersion.Group, Resource: d.Resource}
}

// EtcdPrefix is where the resource's objects live in etcd, without a trailing slash.
func (d *Descriptor) EtcdPrefix() string {
	if d.KeyRoot != "" {
		return d.KeyRoot
	}
	return "/registry/" + d.Resource
}

// Namespaced reports whether the resource's objects live in namespaces.
func (d *Descriptor) Namespaced() bool {
	return d.Strategy != nil && d.Strategy.NamespaceScoped()
}

// NewView is the View that serves the descriptor's resource from stored, the Store of
// StorageOf, with conversions and field-label conversions by convertor. Writes through
// the view are judged by the descriptor's Strategy.
func (d *Descriptor) NewView(stored *Store, convertor runtime.ObjectConvertor) *View {
	return &View{
		Store:       stored.WithStrategy(d.Strategy),
		Kind:        d.GroupVersion.WithKind(d.Kind),
		NewFunc:     d.NewFunc,
		NewListFunc: d.NewListFunc,
		Convertor:   convertor,
	}
}

// NewStore is the generic Store of the descriptor's resource over s.
func (d *Descriptor) NewStore(s storage.Interface) *Store {
	return &Store{
		NewFunc:     d.NewFunc,
		NewListFunc: d.NewListFunc,
		Resource:    d.GroupResource(),
		Kind:        d.Kind,
		KeyRoot:     d.EtcdPrefix(),
		Strategy:    d.Strategy,
		Storage:     s,
	}
}
