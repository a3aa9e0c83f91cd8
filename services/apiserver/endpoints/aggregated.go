package endpoints

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"skiff.dev/services/apiserver/authorization"
)

// AggregatedAPI is the part of the API other servers serve: the group versions of
// APIServices whose spec.service names an extension API server (package aggregator).
// NewHandler hands /apis/<group> and /apis/<group>/<version>/... of those groups to it,
// before custom resources, after authentication, impersonation, the in-flight limit and
// authorization (a resource request is authorized with the attributes kube's
// RequestInfoFactory reads from its URL, as kube-apiserver's WithAuthorization does in
// front of its aggregator); no admission runs (the extension server admits its own
// writes). It merges their groups into discovery, legacy and aggregated. Mirrors the
// place of kube-aggregator in front of kube-apiserver's handler chain.
type AggregatedAPI interface {
	// Handler returns what serves /apis/<group> (version "") or
	// /apis/<group>/<version>[/...] when the aggregator serves it; nil lets the request
	// go on to custom resources (or 404).
	Handler(group, version string) http.Handler
	// Groups are the aggregated groups for /apis (APIGroupList), in priority order.
	Groups() []metav1.APIGroup
	// Discovery is their aggregated discovery (apidiscovery.k8s.io/v2) for /apis.
	Discovery() []apidiscoveryv2.APIGroupDiscovery
	// OpenAPIV3 is the OpenAPI v3 document (JSON) of each aggregated group version, by
	// path ("apis/<group>/<version>"), for /openapi/v3.
	OpenAPIV3() map[string][]byte
}

// aggregatedHandler serves /apis/* for the groups the AggregatedAPI takes, and passes
// every other request on to next.
type aggregatedHandler struct {
	api   AggregatedAPI
	authz authorization.Authorizer
	next  http.Handler
}

// requestInfoFactory reads a request's authorization attributes as kube-apiserver does.
var requestInfoFactory = &genericapirequest.RequestInfoFactory{
	APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
}

func (a *aggregatedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.SplitN(strings.Trim(chi.URLParam(r, "*"), "/"), "/", 3)
	version := ""
	if len(parts) > 1 {
		version = parts[1]
	}
	h := a.api.Handler(parts[0], version)
	if h == nil {
		a.next.ServeHTTP(w, r)
		return
	}
	// /apis/<group> and /apis/<group>/<version> were authorized as non-resource URLs.
	if isResourcePath(r.URL.Path) {
		info, err := requestInfoFactory.NewRequestInfo(r)
		if err != nil {
			writeError(w, err)
			return
		}
		u, _ := genericapirequest.UserFrom(r.Context())
		attrs := authorizer.AttributesRecord{
			User: u, Verb: info.Verb, Namespace: info.Namespace, APIGroup: info.APIGroup, APIVersion: info.APIVersion,
			Resource: info.Resource, Subresource: info.Subresource, Name: info.Name, ResourceRequest: info.IsResourceRequest, Path: info.Path,
		}
		if info.FieldSelector != "" {
			attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = authorization.ParseFieldSelector(info.FieldSelector)
		}
		if err := authorize(r, a.authz, attrs, metav1.GroupResource{Group: info.APIGroup, Resource: info.Resource}); err != nil {
			writeError(w, err)
			return
		}
		r = r.WithContext(genericapirequest.WithRequestInfo(r.Context(), info))
	}
	// The extension server serves it: a watch's initialization is its business, so
	// API Priority and Fairness frees the seat now (kube-aggregator's RequestDelegated).
	utilflowcontrol.RequestDelegated(r.Context())
	// Upgrades (exec-like streams of an extension server) hijack through the middleware.
	h.ServeHTTP(&hijackableWriter{ResponseWriter: w, rc: http.NewResponseController(w)}, r)
}

// mergeAPIGroups folds groups of the same name into the first one listed, adding the
// versions it lacks (a group some of whose versions an extension server serves and
// others custom resources).
func mergeAPIGroups(groups []metav1.APIGroup) []metav1.APIGroup {
	out := make([]metav1.APIGroup, 0, len(groups))
	index := map[string]int{}
	for _, g := range groups {
		i, seen := index[g.Name]
		if !seen {
			index[g.Name] = len(out)
			out = append(out, g)
			continue
		}
		for _, v := range g.Versions {
			if !containsVersion(out[i].Versions, v.Version) {
				out[i].Versions = append(out[i].Versions, v)
			}
		}
	}
	return out
}

func containsVersion(versions []metav1.GroupVersionForDiscovery, version string) bool {
	for _, v := range versions {
		if v.Version == version {
			return true
		}
	}
	return false
}

// mergeGroupDiscovery is mergeAPIGroups for aggregated discovery.
func mergeGroupDiscovery(groups []apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery {
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(groups))
	index := map[string]int{}
	for _, g := range groups {
		i, seen := index[g.Name]
		if !seen {
			index[g.Name] = len(out)
			out = append(out, g)
			continue
		}
	versions:
		for _, v := range g.Versions {
			for _, have := range out[i].Versions {
				if have.Version == v.Version {
					continue versions
				}
			}
			out[i].Versions = append(out[i].Versions, v)
		}
	}
	return out
}
