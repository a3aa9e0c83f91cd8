// Package endpoints serves the Kubernetes REST API over the registry: URL routing (chi),
// request decoding (JSON, YAML, protobuf), responses as JSON or meta.k8s.io Tables,
// watch streams and discovery. Mirrors k8s.io/apiserver/pkg/endpoints.
package endpoints

import (
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Resource is one served resource and its subresources.
type Resource struct {
	// Name is the plural resource name in URLs, e.g. "pods".
	Name string
	// SingularName, e.g. "pod".
	SingularName string
	// Kind, e.g. "Pod".
	Kind string
	// ShortNames for kubectl, e.g. ["po"].
	ShortNames []string
	// Categories, e.g. ["all"].
	Categories []string
	// Namespaced is true for resources that live in namespaces.
	Namespaced bool
	// Storage serves the verbs; which verbs is decided by the rest interfaces it implements.
	Storage rest.Storage
	// Subresources by name, e.g. "status", "binding".
	Subresources map[string]Subresource
}

// Subresource is a resource's subresource, e.g. pods/status.
type Subresource = registry.Subresource

// APIGroupVersion is one group version's resources, e.g. core v1 or
// coordination.k8s.io/v1. Mirrors k8s.io/apiserver/pkg/endpoints.APIGroupVersion.
type APIGroupVersion struct {
	GroupVersion schema.GroupVersion
	Resources    []Resource

	resources map[string]*Resource
}

func (gv *APIGroupVersion) index() {
	gv.resources = make(map[string]*Resource, len(gv.Resources))
	for i := range gv.Resources {
		gv.resources[gv.Resources[i].Name] = &gv.Resources[i]
	}
}

// verbs lists the API verbs storage supports, sorted as discovery reports them.
func verbs(storage rest.Storage) []string {
	var v []string
	if _, ok := storage.(rest.Creater); ok {
		v = append(v, "create")
	}
	if _, ok := storage.(rest.GracefulDeleter); ok {
		v = append(v, "delete")
	}
	if _, ok := storage.(rest.CollectionDeleter); ok {
		v = append(v, "deletecollection")
	}
	if _, ok := storage.(rest.Getter); ok {
		v = append(v, "get")
	}
	if _, ok := storage.(rest.Lister); ok {
		v = append(v, "list")
	}
	if _, ok := storage.(rest.Updater); ok {
		v = append(v, "patch", "update")
	}
	if _, ok := storage.(rest.Watcher); ok {
		v = append(v, "watch")
	}
	if c, ok := storage.(rest.Connecter); ok {
		for _, m := range c.ConnectMethods() {
			switch m {
			case "GET":
				v = append(v, "get")
			case "POST":
				v = append(v, "create")
			}
		}
	}
	sort.Strings(v)
	return v
}

// subresourceVerbs lists the verbs of a subresource's storage: a subresource always
// names one object, so there is no deletecollection (pods/status shares the pods Store).
func subresourceVerbs(storage rest.Storage) []string {
	var v []string
	for _, verb := range verbs(storage) {
		if verb != "deletecollection" {
			v = append(v, verb)
		}
	}
	return v
}

// apiResourceList is the legacy discovery document of gv (GET /api/v1).
func (gv *APIGroupVersion) apiResourceList() *metav1.APIResourceList {
	list := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: gv.GroupVersion.String(),
	}
	for _, r := range gv.Resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.Name, SingularName: r.SingularName, Namespaced: r.Namespaced, Kind: r.Kind,
			Verbs: verbs(r.Storage), ShortNames: r.ShortNames, Categories: r.Categories,
		})
		for _, name := range r.subresourceNames() {
			sub := r.Subresources[name]
			resource := metav1.APIResource{Name: r.Name + "/" + name, Namespaced: r.Namespaced, Kind: sub.Kind, Verbs: subresourceVerbs(sub.Storage)}
			if gvk := subresourceKind(sub, gv.GroupVersion); gvk.GroupVersion() != gv.GroupVersion {
				resource.Group, resource.Version = gvk.Group, gvk.Version
			}
			list.APIResources = append(list.APIResources, resource)
		}
	}
	return list
}

// subresourceKind is the group, version and kind sub reads and writes: the resource's
// group version, unless its storage says otherwise (serviceaccounts/token: TokenRequest
// of authentication.k8s.io/v1).
func subresourceKind(sub Subresource, gv schema.GroupVersion) schema.GroupVersionKind {
	if p, ok := sub.Storage.(rest.GroupVersionKindProvider); ok {
		return p.GroupVersionKind(gv)
	}
	return gv.WithKind(sub.Kind)
}

// subresourceNames lists r's subresources in name order, as discovery reports them.
func (r *Resource) subresourceNames() []string {
	names := make([]string, 0, len(r.Subresources))
	for name := range r.Subresources {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
