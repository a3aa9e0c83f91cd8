package endpoints

import (
	"mime"
	"net"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// aggregatedContentType is the media type of aggregated discovery (apidiscovery.k8s.io/v2).
// client-go branches on it in the response Content-Type: with it, one request per /api and
// /apis replaces one per group version.
const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// discovery serves the legacy discovery documents kubectl and client-go read to map
// kinds to resources: APIVersions at /api, APIGroupList at /apis, APIGroup at
// /apis/<group> and APIResourceList per group version. Mirrors
// k8s.io/apiserver/pkg/endpoints/discovery.
type discovery struct {
	core   *APIGroupVersion
	groups []*APIGroupVersion
	// dynamic are the groups that come and go (custom resources); nil: none.
	dynamic DynamicAPI
	// aggregated are the groups of extension API servers; nil: none.
	aggregated AggregatedAPI
}

func newDiscovery(core *APIGroupVersion, groups []*APIGroupVersion, dynamic DynamicAPI) *discovery {
	return &discovery{core: core, groups: groups, dynamic: dynamic}
}

// wantsAggregated reports whether the Accept header asks for aggregated discovery v2.
func wantsAggregated(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && mediaType == "application/json" && params["g"] == "apidiscovery.k8s.io" &&
			params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList" {
			return true
		}
	}
	return false
}

// groupsOf folds gvs by group: one entry per group, in the order the groups first
// appear, each holding the group's versions in their order in gvs (preferred first,
// e.g. autoscaling v2 then v1).
func groupsOf(gvs []*APIGroupVersion) [][]*APIGroupVersion {
	var out [][]*APIGroupVersion
	index := map[string]int{}
	for _, gv := range gvs {
		i, seen := index[gv.GroupVersion.Group]
		if !seen {
			i = len(out)
			index[gv.GroupVersion.Group] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], gv)
	}
	return out
}

// aggregated is the APIGroupDiscoveryList of the given group versions, one item per
// group with its versions preferred first, as kube-apiserver serves at /api (core) and
// /apis (named groups). Mirrors k8s.io/apiserver/pkg/endpoints/discovery/aggregated.
func aggregated(gvs []*APIGroupVersion) *apidiscoveryv2.APIGroupDiscoveryList {
	list := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	for _, versions := range groupsOf(gvs) {
		item := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: versions[0].GroupVersion.Group}}
		for _, gv := range versions {
			item.Versions = append(item.Versions, versionDiscovery(gv))
		}
		list.Items = append(list.Items, item)
	}
	return list
}

// versionDiscovery is the aggregated discovery of one group version's resources.
func versionDiscovery(gv *APIGroupVersion) apidiscoveryv2.APIVersionDiscovery {
	version := apidiscoveryv2.APIVersionDiscovery{Version: gv.GroupVersion.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, r := range gv.Resources {
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		res := apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, SingularResource: r.SingularName, Scope: scope,
			ResponseKind: &metav1.GroupVersionKind{Group: gv.GroupVersion.Group, Version: gv.GroupVersion.Version, Kind: r.Kind},
			Verbs:        verbs(r.Storage), ShortNames: r.ShortNames, Categories: r.Categories,
		}
		for _, name := range r.subresourceNames() {
			sub := r.Subresources[name]
			kind := subresourceKind(sub, gv.GroupVersion)
			res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{
				Subresource:  name,
				ResponseKind: &metav1.GroupVersionKind{Group: kind.Group, Version: kind.Version, Kind: kind.Kind},
				Verbs:        subresourceVerbs(sub.Storage),
			})
		}
		version.Resources = append(version.Resources, res)
	}
	return version
}

func (d *discovery) serveAPIVersions(w http.ResponseWriter, r *http.Request) {
	if wantsAggregated(r) {
		writeJSON(w, http.StatusOK, aggregatedContentType, aggregated([]*APIGroupVersion{d.core}))
		return
	}
	host := r.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	writeJSON(w, http.StatusOK, "application/json", &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{d.core.GroupVersion.Version},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: host},
		},
	})
}

// apiGroup is the APIGroup document of one group's versions (preferred first).
func apiGroup(versions []*APIGroupVersion) metav1.APIGroup {
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: versions[0].GroupVersion.Group}
	for _, gv := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.GroupVersion.String(), Version: gv.GroupVersion.Version})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

func (d *discovery) serveAPIGroupList(w http.ResponseWriter, r *http.Request) {
	if wantsAggregated(r) {
		list := aggregated(d.groups)
		var extra []apidiscoveryv2.APIGroupDiscovery
		if d.dynamic != nil {
			extra = dynamicAggregated(d.dynamic)
		}
		if d.aggregated != nil {
			extra = mergeGroupDiscovery(append(extra, d.aggregated.Discovery()...))
		}
		list.Items = append(list.Items, extra...)
		writeJSON(w, http.StatusOK, aggregatedContentType, list)
		return
	}
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, versions := range groupsOf(d.groups) {
		g := apiGroup(versions)
		g.TypeMeta = metav1.TypeMeta{}
		list.Groups = append(list.Groups, g)
	}
	var extra []metav1.APIGroup
	if d.dynamic != nil {
		for _, dg := range d.dynamic.Groups() {
			g := dynamicAPIGroup(&dg)
			g.TypeMeta = metav1.TypeMeta{}
			extra = append(extra, g)
		}
	}
	if d.aggregated != nil {
		extra = mergeAPIGroups(append(extra, d.aggregated.Groups()...))
	}
	list.Groups = append(list.Groups, extra...)
	writeJSON(w, http.StatusOK, "application/json", list)
}

func (d *discovery) serveAPIGroup(versions []*APIGroupVersion) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		g := apiGroup(versions)
		writeJSON(w, http.StatusOK, "application/json", &g)
	}
}

func (d *discovery) serveResourceList(gv *APIGroupVersion) http.HandlerFunc {
	list := gv.apiResourceList()
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, "application/json", list)
	}
}
