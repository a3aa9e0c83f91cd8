package endpoints

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// DynamicAPI is the part of the API that changes while the apiserver runs: the custom
// resources CustomResourceDefinitions declare. NewHandler routes /apis/<group>/... of
// any group it does not serve itself to it, through the same authorization, admission,
// field management, tables and watch as built-in resources, and merges it into
// discovery (legacy and aggregated) and OpenAPI. Mirrors what the
// apiextensions-apiserver's crdHandler and its discovery and OpenAPI controllers serve
// behind kube-apiserver.
type DynamicAPI interface {
	// Groups is a snapshot of the groups served now, each with its versions in priority
	// order (the first is the preferred one). A snapshot is never modified.
	Groups() []DynamicGroup
	// OpenAPIV3 returns the OpenAPI v3 document (JSON) of each served group version, by
	// path ("apis/<group>/<version>").
	OpenAPIV3() map[string][]byte
	// OpenAPIV2 returns the Swagger 2.0 paths and definitions of every custom resource,
	// and a name of that state that changes whenever it does; nil when there are none.
	OpenAPIV2() (*spec.Swagger, string)
}

// DynamicGroup is one group of a DynamicAPI.
type DynamicGroup struct {
	Name     string
	Versions []*APIGroupVersion
}

// NewAPIGroupVersion is a group version serving resources, ready to route.
func NewAPIGroupVersion(gv schema.GroupVersion, resources []Resource) *APIGroupVersion {
	g := &APIGroupVersion{GroupVersion: gv, Resources: resources}
	g.index()
	return g
}

// FieldManagerProvider is storage that builds its own FieldManagers: custom resources,
// whose schemas come from their CRD rather than from the generated definitions.
type FieldManagerProvider interface {
	// FieldManager is the FieldManager of the subresource ("" for the resource).
	FieldManager(subresource string) (*managedfields.FieldManager, error)
}

// UnknownFieldPruner is storage whose schema drops the fields it does not know from a
// decoded object (custom resources: pruning), reporting their paths so fieldValidation
// can warn about them or refuse them as for built-in kinds.
type UnknownFieldPruner interface {
	// PruneUnknownFields drops obj's unknown fields and returns their paths, e.g.
	// "spec.colour".
	PruneUnknownFields(obj runtime.Object) []string
}

// dynamicHandler serves /apis/* for the groups of a DynamicAPI: their discovery and
// their resources.
type dynamicHandler struct {
	api       DynamicAPI
	discovery *discovery
	newGV     func(gv *APIGroupVersion) *resourceHandler
}

func (d *dynamicHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.SplitN(strings.Trim(chi.URLParam(r, "*"), "/"), "/", 3)
	group := d.group(parts[0])
	if group == nil {
		writeError(w, notFoundPath(r.URL.Path))
		return
	}
	if len(parts) == 1 {
		g := dynamicAPIGroup(group)
		writeJSON(w, http.StatusOK, "application/json", &g)
		return
	}
	var gv *APIGroupVersion
	for _, v := range group.Versions {
		if v.GroupVersion.Version == parts[1] {
			gv = v
		}
	}
	if gv == nil {
		writeError(w, notFoundPath(r.URL.Path))
		return
	}
	if len(parts) == 2 || parts[2] == "" {
		if r.Method != http.MethodGet {
			writeError(w, notFoundPath(r.URL.Path))
			return
		}
		writeJSON(w, http.StatusOK, "application/json", gv.apiResourceList())
		return
	}
	d.newGV(gv).serveResource(w, r, parts[2])
}

func (d *dynamicHandler) group(name string) *DynamicGroup {
	for _, g := range d.api.Groups() {
		if g.Name == name {
			return &g
		}
	}
	return nil
}

// dynamicAPIGroup is the APIGroup discovery document of g.
func dynamicAPIGroup(g *DynamicGroup) metav1.APIGroup {
	out := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: g.Name}
	for _, v := range g.Versions {
		out.Versions = append(out.Versions, metav1.GroupVersionForDiscovery{GroupVersion: v.GroupVersion.String(), Version: v.GroupVersion.Version})
	}
	if len(out.Versions) > 0 {
		out.PreferredVersion = out.Versions[0]
	}
	return out
}

// dynamicAggregated is the aggregated discovery of api's groups.
func dynamicAggregated(api DynamicAPI) []apidiscoveryv2.APIGroupDiscovery {
	var items []apidiscoveryv2.APIGroupDiscovery
	for _, g := range api.Groups() {
		item := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, v := range aggregated(g.Versions).Items {
			item.Versions = append(item.Versions, v.Versions...)
		}
		items = append(items, item)
	}
	return items
}
