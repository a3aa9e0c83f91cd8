package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// acceptAggregated asks an extension server for its aggregated discovery, v2 or
// v2beta1 (same shape), as kube's discovery manager does.
const acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," +
	"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

// maxDiscoveryBytes bounds a discovery document read from an extension server.
const maxDiscoveryBytes = 8 << 20

// discoveryCache holds, per remote APIService, the resources its server last listed
// for its group version.
type discoveryCache struct {
	mu      sync.Mutex
	entries map[string]discoveryEntry // by APIService name
}

type discoveryEntry struct {
	resources []apidiscoveryv2.APIResourceDiscovery // never modified once stored
	fresh     bool
	// openAPIPath and openAPIV3 are the server's OpenAPI v3 document of the group
	// version ("apis/<group>/<version>") and its bytes; nil when it serves none.
	openAPIPath string
	openAPIV3   []byte
}

func newDiscoveryCache() *discoveryCache {
	return &discoveryCache{entries: map[string]discoveryEntry{}}
}

// version is s's group version in aggregated discovery: Current when its server's
// listing was last read fine, Stale (with what was read before, if anything) otherwise.
func (c *discoveryCache) version(s *apiregistrationv1.APIService) apidiscoveryv2.APIVersionDiscovery {
	c.mu.Lock()
	e := c.entries[s.Name]
	c.mu.Unlock()
	v := apidiscoveryv2.APIVersionDiscovery{Version: s.Spec.Version, Resources: e.resources, Freshness: apidiscoveryv2.DiscoveryFreshnessStale}
	if e.fresh {
		v.Freshness = apidiscoveryv2.DiscoveryFreshnessCurrent
	}
	return v
}

func (c *discoveryCache) set(name string, resources []apidiscoveryv2.APIResourceDiscovery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[name] = discoveryEntry{resources: resources, fresh: true}
}

// setOpenAPI keeps the OpenAPI v3 document name's server serves at path.
func (c *discoveryCache) setOpenAPI(name, path string, doc []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[name]
	e.openAPIPath, e.openAPIV3 = path, doc
	c.entries[name] = e
}

// openAPI is the kept OpenAPI v3 document of each of names, by path.
func (c *discoveryCache) openAPI(names []string) map[string][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	docs := map[string][]byte{}
	for _, name := range names {
		if e := c.entries[name]; e.openAPIV3 != nil {
			docs[e.openAPIPath] = e.openAPIV3
		}
	}
	return docs
}

func (c *discoveryCache) markStale(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[name]
	e.fresh = false
	c.entries[name] = e
}

func (c *discoveryCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// refreshDiscovery reads the resources of s's group version from its server and caches
// them; on failure the cached ones go Stale.
func (a *Aggregator) refreshDiscovery(ctx context.Context, s *apiregistrationv1.APIService) {
	resources, err := a.fetchDiscovery(ctx, s)
	if err != nil {
		slog.Debug("reading an aggregated API's discovery", "apiservice", s.Name, "err", err)
		a.discovery.markStale(s.Name)
		return
	}
	a.discovery.set(s.Name, resources)
	path, doc, err := a.fetchOpenAPIV3(ctx, s)
	if err != nil {
		slog.Debug("reading an aggregated API's OpenAPI v3", "apiservice", s.Name, "err", err)
		return // the document read before, if any, stays
	}
	a.discovery.setOpenAPI(s.Name, path, doc)
}

// fetchOpenAPIV3 reads s's group version's OpenAPI v3 document from its server: the
// /openapi/v3 index, then the document the index names for "apis/<group>/<version>".
// A server that serves no OpenAPI v3 (404) has none: a nil document. Mirrors the v3
// aggregation of kube-aggregator (pkg/controllers/openapiv3), which proxies each group
// version's document.
func (a *Aggregator) fetchOpenAPIV3(ctx context.Context, s *apiregistrationv1.APIService) (string, []byte, error) {
	get, err := a.backendGet(ctx, s)
	if err != nil {
		return "", nil, err
	}
	path := "apis/" + s.Spec.Group + "/" + s.Spec.Version
	resp, body, err := get("/openapi/v3", "application/json", []string{"system:masters"})
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return path, nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("OpenAPI v3 index: %d", resp.StatusCode)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(body, &index); err != nil {
		return "", nil, fmt.Errorf("OpenAPI v3 index: %w", err)
	}
	ref, ok := index.Paths[path]
	if !ok {
		return path, nil, nil
	}
	u, err := url.Parse(ref.ServerRelativeURL)
	if err != nil {
		return "", nil, err
	}
	resp, body, err = get(u.Path, "application/json", []string{"system:masters"})
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode != http.StatusOK || !json.Valid(body) {
		return "", nil, fmt.Errorf("OpenAPI v3 document %s: %d", u.Path, resp.StatusCode)
	}
	return path, body, nil
}

// fetchDiscovery asks s's server for its aggregated discovery at /apis and takes s's
// group version from it; a server that does not serve it (any other answer) is asked
// for the group version's APIResourceList instead. Mirrors the discovery manager's
// fetchFreshDiscoveryForService.
func (a *Aggregator) fetchDiscovery(ctx context.Context, s *apiregistrationv1.APIService) ([]apidiscoveryv2.APIResourceDiscovery, error) {
	get, err := a.backendGet(ctx, s)
	if err != nil {
		return nil, err
	}
	port := int32(443)
	if s.Spec.Service.Port != nil {
		port = *s.Spec.Service.Port
	}
	resp, body, err := get("/apis", acceptAggregated, []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		return nil, fmt.Errorf("service %s/%s:%d returned non-success response code: %d", s.Spec.Service.Namespace, s.Spec.Service.Name, port, resp.StatusCode)
	}
	if resp.StatusCode == http.StatusOK && isAggregatedDiscovery(resp.Header.Get("Content-Type")) {
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, err
		}
		for _, g := range list.Items {
			if g.Name != s.Spec.Group {
				continue
			}
			for _, v := range g.Versions {
				if v.Version == s.Spec.Version {
					return fillResponseKinds(v.Resources), nil
				}
			}
		}
		return nil, nil // the server serves the group version without listing it
	}
	path := "/apis/" + s.Spec.Group + "/" + s.Spec.Version
	if s.Spec.Group == "" {
		path = "/api/" + s.Spec.Version
	}
	resp, body, err = get(path, "application/json", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("failed to download legacy discovery for %s: %d %.200s", path, resp.StatusCode, body)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	return convertResources(list.APIResources), nil
}

// getFunc GETs path from an APIService's server as system:kube-aggregator in groups,
// accepting accept, and returns the answer and its body (at most maxDiscoveryBytes).
type getFunc func(path, accept string, groups []string) (*http.Response, []byte, error)

// backendGet is the getFunc of s's server: a ready endpoint of its Service, over its
// backend's transport. Errors: no transport, no endpoint.
func (a *Aggregator) backendGet(ctx context.Context, s *apiregistrationv1.APIService) (getFunc, error) {
	b := a.backendOf(s.Name)
	if b == nil || b.err != nil {
		return nil, fmt.Errorf("no transport to %s", s.Name)
	}
	port := int32(443)
	if s.Spec.Service.Port != nil {
		port = *s.Spec.Service.Port
	}
	addr, err := a.cfg.Resolver.Resolve(ctx, s.Spec.Service.Namespace, s.Spec.Service.Name, port)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: a.wrap(b.transport), Timeout: checkTimeout}
	return func(path, accept string, groups []string) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, (&url.URL{Scheme: "https", Host: addr, Path: path}).String(), nil)
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Accept", accept)
		transport.SetAuthProxyHeaders(req, "system:kube-aggregator", "", groups, nil)
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryBytes))
		return resp, body, err
	}, nil
}

// isAggregatedDiscovery reports whether contentType is an APIGroupDiscoveryList, v2 or
// v2beta1.
func isAggregatedDiscovery(contentType string) bool {
	mediaType, params, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json" && params["g"] == "apidiscovery.k8s.io" &&
		(params["v"] == "v2" || params["v"] == "v2beta1") && params["as"] == "APIGroupDiscoveryList"
}

// fillResponseKinds gives every resource and subresource a responseKind, which some
// client-go versions dereference (kube does the same).
func fillResponseKinds(resources []apidiscoveryv2.APIResourceDiscovery) []apidiscoveryv2.APIResourceDiscovery {
	for i := range resources {
		if resources[i].ResponseKind == nil {
			resources[i].ResponseKind = &metav1.GroupVersionKind{}
		}
		for j := range resources[i].Subresources {
			if resources[i].Subresources[j].ResponseKind == nil {
				resources[i].Subresources[j].ResponseKind = &metav1.GroupVersionKind{}
			}
		}
	}
	return resources
}

// convertResources turns an APIResourceList's resources into aggregated discovery's,
// subresources under their resource. Mirrors kube's
// endpoints.ConvertGroupVersionIntoToDiscovery.
func convertResources(list []metav1.APIResource) []apidiscoveryv2.APIResourceDiscovery {
	var out []apidiscoveryv2.APIResourceDiscovery
	parents := map[string]int{}
	scopeOf := func(r metav1.APIResource) apidiscoveryv2.ResourceScope {
		if r.Namespaced {
			return apidiscoveryv2.ScopeNamespace
		}
		return apidiscoveryv2.ScopeCluster
	}
	for _, r := range list {
		if strings.Contains(r.Name, "/") {
			continue
		}
		parents[r.Name] = len(out)
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, Scope: scopeOf(r), SingularResource: r.SingularName,
			ResponseKind: &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Verbs:        r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
		})
	}
	for _, r := range list {
		parent, sub, ok := strings.Cut(r.Name, "/")
		if !ok {
			continue
		}
		i, exists := parents[parent]
		if !exists {
			i = len(out)
			parents[parent] = i
			out = append(out, apidiscoveryv2.APIResourceDiscovery{Resource: parent, Scope: scopeOf(r), ResponseKind: &metav1.GroupVersionKind{}})
		}
		out[i].Subresources = append(out[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource: sub, Verbs: r.Verbs,
			ResponseKind: &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
		})
	}
	return out
}
