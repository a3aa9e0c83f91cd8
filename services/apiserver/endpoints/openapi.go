package endpoints

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	apiopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
)

// openAPI serves OpenAPI v3 (/openapi/v3 and one document per group version) and v2
// (/openapi/v2, for older clients and kubectl's client-side validation) and gives
// server-side apply its type information, both from the same schemas: the definitions
// openapi-gen generated from k8s.io/api's Go types (skiff.dev/services/apiserver/openapi),
// named and tagged with x-kubernetes-group-version-kind by kube's DefinitionNamer over
// skiff's scheme. Each document holds a path per resource URL with its operations
// (x-kubernetes-action, x-kubernetes-group-version-kind, the query parameters each verb
// honours, fieldValidation included) and, in components.schemas, every schema those
// operations reach, descriptions included: what `kubectl explain` reads and what
// kubectl's query-param verifier looks for before it sends fieldValidation=Strict
// (cli-runtime/pkg/resource/query_param_verifier_v3.go). Documents are built once, on
// first use, and addressed by their hash. Mirrors kube-apiserver's OpenAPI v3 service
// (k8s.io/apiserver/pkg/server/routes/openapi.go with kube-openapi's builder3).
type openAPI struct {
	gvs []*APIGroupVersion
	// dynamic adds the custom resources' documents; nil: none.
	dynamic DynamicAPI
	// aggregated adds the extension API servers' v3 documents; nil: none.
	aggregated     AggregatedAPI
	getDefinitions common.GetOpenAPIDefinitions
	// definitions tells which models exist; builders get fresh ones (config), as they
	// change the schemas' extension maps in place.
	definitions map[string]common.OpenAPIDefinition
	namer       *apiopenapi.DefinitionNamer

	v2Once sync.Once
	v2     *spec.Swagger
	v2Err  error
	// merged is the last v2 document with the dynamic API's merged in, and its name.
	mergedMu              sync.Mutex
	merged                *spec.Swagger
	mergedName, mergedErr string

	docsOnce   sync.Once
	index      []byte
	indexPaths map[string]pathRef
	docs       map[string][]byte // "api/v1" → JSON document
	etags      map[string]string // "" (the index) and "api/v1" → SHA-512 of the bytes
	docsErr    error

	modelsOnce    sync.Once
	typeConverter managedfields.TypeConverter
	modelsErr     error
}

func newOpenAPI(gvs []*APIGroupVersion, definitions common.GetOpenAPIDefinitions) *openAPI {
	o := &openAPI{gvs: gvs, getDefinitions: definitions, namer: apiopenapi.NewDefinitionNamer(scheme.Scheme)}
	if definitions != nil {
		o.definitions = definitions(v3Ref)
	}
	return o
}

// v3Ref references a model in an OpenAPI v3 document's components; DefinitionNamer
// keeps model names as they are.
func v3Ref(name string) spec.Ref {
	return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(name))
}

// config is builder3's configuration, with definitions of its own.
func (o *openAPI) config() *common.OpenAPIV3Config {
	return &common.OpenAPIV3Config{
		Info:              &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: Version.GitVersion}},
		Definitions:       o.getDefinitions(v3Ref),
		GetDefinitionName: o.namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: func(r common.Route) (string, []string, error) {
			return r.OperationName(), r.(*route).tags, nil
		},
		CommonResponses: map[int]*spec3.Response{
			http.StatusUnauthorized: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}},
		},
	}
}

// registerV2 serves /openapi/v2, the one Swagger 2.0 document of every group version,
// as JSON or, for kubectl and client-go, protobuf (application/com.github.proto-openapi.spec.v2.v1.0+protobuf),
// with an ETag, through kube-openapi's handler as kube-apiserver does. It is built on
// first request from the same routes and definitions as /openapi/v3.
func (o *openAPI) registerV2(mux common.PathHandler) {
	svc := handler.NewOpenAPIServiceLazy(cached.Func(func() (*spec.Swagger, string, error) {
		o.v2Once.Do(func() { o.v2, o.v2Err = o.swagger() })
		if o.v2Err != nil || o.dynamic == nil {
			return o.v2, "v2", o.v2Err // built once: one version for the handler's caches
		}
		return o.mergedV2()
	}))
	svc.RegisterOpenAPIVersionedService("/openapi/v2", mux)
}

// swagger builds the OpenAPI v2 document with kube-openapi's builder. It runs in the
// handler's cache goroutine, where a panic would end the process: it becomes an error.
func (o *openAPI) swagger() (_ *spec.Swagger, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("building OpenAPI v2: %v", p)
		}
	}()
	if o.getDefinitions == nil {
		return nil, fmt.Errorf("no OpenAPI definitions configured")
	}
	var containers []common.RouteContainer
	for _, gv := range o.gvs {
		prefix := "/" + groupVersionPath(gv.GroupVersion)
		routes, err := o.gvRoutes(gv, prefix)
		if err != nil {
			return nil, err
		}
		containers = append(containers, routeContainer{root: prefix, routes: routes})
	}
	return builder.BuildOpenAPISpecFromRoutes(containers, &common.Config{
		Info:              &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: Version.GitVersion}},
		GetDefinitions:    o.getDefinitions,
		GetDefinitionName: o.namer.GetDefinitionName,
		GetOperationIDAndTagsFromRoute: func(r common.Route) (string, []string, error) {
			return r.OperationName(), r.(*route).tags, nil
		},
		CommonResponses: map[int]spec.Response{
			http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}},
		},
	})
}

// TypeConverter is the type information server-side apply and managedFields use: every
// served kind's schema, as kube-apiserver builds it for its FieldManagers
// (managedfields.NewTypeConverter over builder3.BuildOpenAPIDefinitionsForResources).
func (o *openAPI) TypeConverter() (managedfields.TypeConverter, error) {
	o.modelsOnce.Do(func() {
		if o.definitions == nil {
			o.modelsErr = fmt.Errorf("no OpenAPI definitions configured")
			return
		}
		var names []string
		seen := map[string]bool{}
		for _, gv := range o.gvs {
			for _, r := range gv.Resources {
				objs := []runtime.Object{r.Storage.New()}
				for _, sub := range r.Subresources {
					if _, stream := sub.Storage.(rest.Connecter); !stream {
						objs = append(objs, sub.Storage.New())
					}
				}
				for _, obj := range objs {
					name := modelName(obj)
					if _, ok := o.definitions[name]; ok && !seen[name] {
						seen[name] = true
						names = append(names, name)
					}
				}
			}
		}
		models, err := builder3.BuildOpenAPIDefinitionsForResources(o.config(), names...)
		if err != nil {
			o.modelsErr = err
			return
		}
		o.typeConverter, o.modelsErr = managedfields.NewTypeConverter(models, false)
	})
	return o.typeConverter, o.modelsErr
}

// mergedV2 is the static v2 document with the dynamic API's paths and definitions
// merged in, rebuilt only when those change.
func (o *openAPI) mergedV2() (*spec.Swagger, string, error) {
	extra, name := o.dynamic.OpenAPIV2()
	if extra == nil {
		return o.v2, "v2", nil
	}
	o.mergedMu.Lock()
	defer o.mergedMu.Unlock()
	if o.mergedName != name {
		merged, err := mergeSwagger(o.v2, extra)
		o.merged, o.mergedName, o.mergedErr = merged, name, ""
		if err != nil {
			o.mergedErr = err.Error()
		}
	}
	if o.mergedErr != "" {
		return nil, "", fmt.Errorf("merging the custom resources' OpenAPI: %s", o.mergedErr)
	}
	return o.merged, "v2-" + name, nil
}

// mergeSwagger is base with extra's paths and definitions added; base is not changed.
// A path or definition base has already is kept from base.
func mergeSwagger(base, extra *spec.Swagger) (*spec.Swagger, error) {
	out := *base
	out.SwaggerProps.Paths = &spec.Paths{Paths: map[string]spec.PathItem{}}
	if base.Paths != nil {
		for k, v := range base.Paths.Paths {
			out.Paths.Paths[k] = v
		}
	}
	out.Definitions = spec.Definitions{}
	for k, v := range base.Definitions {
		out.Definitions[k] = v
	}
	if extra.Paths != nil {
		for k, v := range extra.Paths.Paths {
			if _, ok := out.Paths.Paths[k]; !ok {
				out.Paths.Paths[k] = v
			}
		}
	}
	for k, v := range extra.Definitions {
		if _, ok := out.Definitions[k]; !ok {
			out.Definitions[k] = v
		}
	}
	return &out, nil
}

// pathRef is one group version's entry in the /openapi/v3 index.
type pathRef struct {
	ServerRelativeURL string `json:"serverRelativeURL"`
}

// build makes the index and every group version's document, each with its ETag.
func (o *openAPI) build() {
	o.docs, o.etags = map[string][]byte{}, map[string]string{}
	index := map[string]map[string]pathRef{"paths": {}}
	for _, gv := range o.gvs {
		prefix := groupVersionPath(gv.GroupVersion)
		doc, err := o.document(gv, "/"+prefix)
		if err != nil {
			o.docsErr = fmt.Errorf("OpenAPI document of %s: %w", gv.GroupVersion, err)
			return
		}
		o.docs[prefix], o.etags[prefix] = doc, hash(doc)
		index["paths"][prefix] = pathRef{ServerRelativeURL: "/openapi/v3/" + prefix + "?hash=" + hash(doc)}
	}
	o.indexPaths = index["paths"]
	o.index, o.docsErr = json.Marshal(index)
	o.etags[""] = hash(o.index)
}

// extraV3 are the v3 documents of custom resources and aggregated APIs, by path.
func (o *openAPI) extraV3() map[string][]byte {
	docs := map[string][]byte{}
	if o.aggregated != nil {
		for k, v := range o.aggregated.OpenAPIV3() {
			docs[k] = v
		}
	}
	if o.dynamic != nil {
		for k, v := range o.dynamic.OpenAPIV3() {
			docs[k] = v
		}
	}
	return docs
}

// currentIndex is the index with the dynamic and aggregated documents added, and its
// ETag.
func (o *openAPI) currentIndex() ([]byte, string, error) {
	docs := o.extraV3()
	if len(docs) == 0 {
		return o.index, o.etags[""], nil
	}
	paths := make(map[string]pathRef, len(o.indexPaths)+len(docs))
	for k, v := range o.indexPaths {
		paths[k] = v
	}
	for k, doc := range docs {
		if _, ok := paths[k]; !ok {
			paths[k] = pathRef{ServerRelativeURL: "/openapi/v3/" + k + "?hash=" + hash(doc)}
		}
	}
	index, err := json.Marshal(map[string]map[string]pathRef{"paths": paths})
	return index, hash(index), err
}

// hash is the hex SHA-512 of data in upper case, as kube-apiserver addresses documents.
func hash(data []byte) string {
	sum := sha512.Sum512(data)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// groupVersionPath is "api/v1" for the core group, "apis/<group>/<version>" otherwise.
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.String()
}

// document builds the OpenAPI 3.0 document of one group version.
func (o *openAPI) document(gv *APIGroupVersion, prefix string) ([]byte, error) {
	if o.definitions == nil {
		return nil, fmt.Errorf("no OpenAPI definitions configured")
	}
	routes, err := o.gvRoutes(gv, prefix)
	if err != nil {
		return nil, err
	}
	doc, err := builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{routeContainer{root: prefix, routes: routes}}, o.config())
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

func (o *openAPI) serveIndex(w http.ResponseWriter, r *http.Request) {
	o.docsOnce.Do(o.build)
	if o.docsErr != nil {
		writeError(w, o.docsErr)
		return
	}
	index, etag, err := o.currentIndex()
	if err != nil {
		writeError(w, err)
		return
	}
	serveCached(w, r, index, etag)
}

func (o *openAPI) serveDocument(w http.ResponseWriter, r *http.Request) {
	o.docsOnce.Do(o.build)
	if o.docsErr != nil {
		writeError(w, o.docsErr)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/openapi/v3/")
	doc, ok := o.docs[path]
	etag := o.etags[path]
	if !ok {
		if doc, ok = o.extraV3()[path]; ok {
			etag = hash(doc)
		}
	}
	if !ok {
		writeError(w, notFoundPath(r.URL.Path))
		return
	}
	if r.URL.Query().Get("hash") != "" {
		// A document addressed by its hash never changes (kube-apiserver does the same).
		w.Header().Set("Cache-Control", "public, immutable")
	}
	serveCached(w, r, doc, etag)
}

// serveCached writes a JSON document with its ETag; a request whose If-None-Match
// names it gets 304 Not Modified and no body, as from kube-openapi's handler3.
func serveCached(w http.ResponseWriter, r *http.Request, data []byte, etag string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Etag", strconv.Quote(etag))
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// modelName is the OpenAPI model name of a Go object, e.g. "io.k8s.api.core.v1.Pod".
func modelName(obj interface{}) string {
	if n, ok := obj.(interface{ OpenAPIModelName() string }); ok {
		return n.OpenAPIModelName()
	}
	if _, ok := obj.(string); ok {
		return "string"
	}
	return fmt.Sprintf("%T", obj)
}

// routeContainer is one group version's routes for builder3.
type routeContainer struct {
	root   string
	routes []common.Route
}

func (c routeContainer) RootPath() string                   { return c.root }
func (c routeContainer) PathParameters() []common.Parameter { return nil }
func (c routeContainer) Routes() []common.Route             { return c.routes }

// route is one operation on one path, as kube's installer registers it with go-restful.
type route struct {
	method, path, operation string
	tags                    []string
	params                  []common.Parameter
	consumes, produces      []string
	metadata                map[string]interface{}
	request, response       interface{}
	responses               []common.StatusCodeResponse
}

func (r *route) Method() string                                   { return r.method }
func (r *route) Path() string                                     { return r.path }
func (r *route) OperationName() string                            { return r.operation }
func (r *route) Parameters() []common.Parameter                   { return r.params }
func (r *route) Description() string                              { return "" }
func (r *route) Consumes() []string                               { return r.consumes }
func (r *route) Produces() []string                               { return r.produces }
func (r *route) Metadata() map[string]interface{}                 { return r.metadata }
func (r *route) RequestPayloadSample() interface{}                { return r.request }
func (r *route) ResponsePayloadSample() interface{}               { return r.response }
func (r *route) StatusCodeResponses() []common.StatusCodeResponse { return r.responses }

type param struct {
	name, description, dataType string
	kind                        common.ParameterKind
	required                    bool
}

func (p param) Name() string               { return p.name }
func (p param) Description() string        { return p.description }
func (p param) Required() bool             { return p.required }
func (p param) Kind() common.ParameterKind { return p.kind }
func (p param) DataType() string           { return p.dataType }
func (p param) AllowMultiple() bool        { return false }

type response struct {
	code  int
	model interface{}
}

func (r response) Code() int          { return r.code }
func (r response) Message() string    { return http.StatusText(r.code) }
func (r response) Model() interface{} { return r.model }

func query(name, dataType, description string) param {
	return param{name: name, dataType: dataType, description: description, kind: common.QueryParameterKind}
}

// The query parameters each verb honours, described as kube describes them.
var (
	pathName      = param{name: "name", dataType: "string", description: "name of the object", kind: common.PathParameterKind, required: true}
	pathNamespace = param{name: "namespace", dataType: "string", description: "object name and auth scope, such as for teams and projects", kind: common.PathParameterKind, required: true}
	body          = param{name: "body", kind: common.BodyParameterKind, required: true}
	pretty        = query("pretty", "string", "If 'true', then the output is pretty printed.")
	dryRun        = query("dryRun", "string", "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed")
	fieldManager  = query("fieldManager", "string", "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).")
	fieldValid    = query("fieldValidation", "string", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.")
	force         = query("force", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.")
	gracePeriod   = query("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used.")
	propagation   = query("propagationPolicy", "string", "Whether and how garbage collection will be performed.")
	listParams    = []common.Parameter{
		query("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
		query("continue", "string", "The continue option should be set when retrieving more results from the server."),
		query("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields. Defaults to everything."),
		query("labelSelector", "string", "A selector to restrict the list of returned objects by their labels. Defaults to everything."),
		query("limit", "integer", "limit is a maximum number of responses to return for a list call."),
		query("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request may be served from."),
		query("resourceVersionMatch", "string", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
		query("sendInitialEvents", "boolean", "`sendInitialEvents=true` may be set together with `watch=true`: the stream begins with synthetic events for the current state, then a bookmark."),
		query("timeoutSeconds", "integer", "Timeout for the list/watch call."),
		query("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
	}
)

var (
	objectMediaTypes = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	listMediaTypes   = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"}
	patchMediaTypes  = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}
)

// gvRoutes lists the operations of every resource and subresource of gv, named as
// kube-apiserver names them (readCoreV1NamespacedPod, patchAppsV1NamespacedDeployment).
func (o *openAPI) gvRoutes(gv *APIGroupVersion, prefix string) ([]common.Route, error) {
	tag := operationGroup(gv.GroupVersion)
	tags := []string{strings.ReplaceAll(strings.TrimSuffix(gv.GroupVersion.Group, ".k8s.io"), ".", "") + "_" + gv.GroupVersion.Version}
	if gv.GroupVersion.Group == "" {
		tags = []string{"core_" + gv.GroupVersion.Version}
	}
	routes := []common.Route{&route{
		method: "GET", path: prefix + "/", operation: "get" + tag + "APIResources", tags: tags,
		produces: []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"},
		response: &metav1.APIResourceList{},
	}}
	resources := append([]Resource(nil), gv.Resources...)
	sort.Slice(resources, func(i, j int) bool { return resources[i].Name < resources[j].Name })
	for _, r := range resources {
		kind := gv.GroupVersion.WithKind(r.Kind)
		obj := r.Storage.New()
		if _, ok := o.definitions[modelName(obj)]; !ok {
			// Fail this resource, not the whole API: kubectl would refuse every apply.
			slog.Error("no OpenAPI schema: run `make openapi` with the type's package added", "resource", r.Name, "model", modelName(obj))
			continue
		}
		collection, scope, scopeParams := prefix+"/"+r.Name, "", []common.Parameter(nil)
		if r.Namespaced {
			collection, scope, scopeParams = prefix+"/namespaces/{namespace}/"+r.Name, "Namespaced", []common.Parameter{pathNamespace}
		}
		add := func(method, path, action, verb string, gvk schema.GroupVersionKind, params []common.Parameter, request, resp interface{}, codes ...int) {
			rt := &route{
				method: method, path: path, operation: verb + tag + scope + gvk.Kind, tags: tags,
				params: append(append([]common.Parameter{pretty}, scopeParams...), params...), produces: objectMediaTypes,
				metadata: map[string]interface{}{
					"x-kubernetes-action":             action,
					"x-kubernetes-group-version-kind": map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
				},
				request: request, response: resp,
			}
			switch method {
			case "POST", "PUT":
				rt.consumes = objectMediaTypes
			case "PATCH":
				rt.consumes = patchMediaTypes
			}
			for _, code := range codes {
				rt.responses = append(rt.responses, response{code: code, model: resp})
			}
			if action == "list" {
				rt.produces = listMediaTypes
			}
			if action == "deletecollection" {
				rt.operation = verb + tag + "Collection" + scope + gvk.Kind
			}
			routes = append(routes, rt)
		}
		item := collection + "/{name}"
		named := []common.Parameter{pathName}
		storage := r.Storage
		if lister, ok := storage.(rest.Lister); ok {
			add("GET", collection, "list", "list", kind, listParams, nil, lister.NewList(), http.StatusOK)
			if r.Namespaced {
				// The same list across every namespace: /api/v1/pods.
				all := prefix + "/" + r.Name
				routes = append(routes, &route{
					method: "GET", path: all, operation: "list" + tag + r.Kind + "ForAllNamespaces", tags: tags,
					params: append([]common.Parameter{pretty}, listParams...), produces: listMediaTypes,
					metadata: map[string]interface{}{
						"x-kubernetes-action":             "list",
						"x-kubernetes-group-version-kind": map[string]string{"group": kind.Group, "version": kind.Version, "kind": kind.Kind},
					},
					response:  lister.NewList(),
					responses: []common.StatusCodeResponse{response{code: http.StatusOK, model: lister.NewList()}},
				})
			}
		}
		if _, ok := storage.(rest.Creater); ok {
			add("POST", collection, "post", "create", kind, []common.Parameter{body, dryRun, fieldManager, fieldValid}, obj, obj, http.StatusOK, http.StatusCreated, http.StatusAccepted)
		}
		if _, ok := storage.(rest.CollectionDeleter); ok {
			add("DELETE", collection, "deletecollection", "delete", kind, append([]common.Parameter{body, dryRun, gracePeriod, propagation}, listParams...), &metav1.DeleteOptions{}, &metav1.Status{}, http.StatusOK)
		}
		if _, ok := storage.(rest.Getter); ok {
			add("GET", item, "get", "read", kind, named, nil, obj, http.StatusOK)
		}
		if _, ok := storage.(rest.Updater); ok {
			add("PUT", item, "put", "replace", kind, append([]common.Parameter{body, dryRun, fieldManager, fieldValid}, named...), obj, obj, http.StatusOK, http.StatusCreated)
			add("PATCH", item, "patch", "patch", kind, append([]common.Parameter{body, dryRun, fieldManager, fieldValid, force}, named...), &metav1.Patch{}, obj, http.StatusOK, http.StatusCreated)
		}
		if _, ok := storage.(rest.GracefulDeleter); ok {
			add("DELETE", item, "delete", "delete", kind, append([]common.Parameter{body, dryRun, gracePeriod, propagation}, named...), &metav1.DeleteOptions{}, obj, http.StatusOK, http.StatusAccepted)
		}
		for _, name := range r.subresourceNames() {
			sub := r.Subresources[name]
			subObj := sub.Storage.New()
			subKind := subresourceKind(sub, gv.GroupVersion)
			if _, stream := sub.Storage.(rest.Connecter); !stream {
				if _, ok := o.definitions[modelName(subObj)]; !ok {
					slog.Error("no OpenAPI schema: run `make openapi` with the type's package added", "resource", r.Name+"/"+name, "model", modelName(subObj))
					continue
				}
			}
			path, suffix := item+"/"+name, upperFirst(name)
			subAdd := func(method, action, verb string, params []common.Parameter, request, resp interface{}, codes ...int) {
				add(method, path, action, verb, subKind, append(params, named...), request, resp, codes...)
				last := routes[len(routes)-1].(*route)
				last.operation = verb + tag + scope + r.Kind + suffix
			}
			if c, ok := sub.Storage.(rest.Connecter); ok {
				// Streams (exec, attach, portforward, log): the answer is not an object.
				for _, method := range c.ConnectMethods() {
					subAdd(method, "connect", "connect"+upperFirst(strings.ToLower(method)), nil, nil, "", http.StatusOK)
					last := routes[len(routes)-1].(*route)
					last.produces = []string{"*/*"}
					last.metadata["x-kubernetes-group-version-kind"] = map[string]string{"group": kind.Group, "version": kind.Version, "kind": sub.Kind}
				}
				continue
			}
			if _, ok := sub.Storage.(rest.Getter); ok {
				subAdd("GET", "get", "read", nil, nil, subObj, http.StatusOK)
			}
			if _, ok := sub.Storage.(rest.Updater); ok {
				subAdd("PUT", "put", "replace", []common.Parameter{body, dryRun, fieldManager, fieldValid}, subObj, subObj, http.StatusOK, http.StatusCreated)
				subAdd("PATCH", "patch", "patch", []common.Parameter{body, dryRun, fieldManager, fieldValid, force}, &metav1.Patch{}, subObj, http.StatusOK, http.StatusCreated)
			} else if _, ok := sub.Storage.(rest.Creater); ok {
				subAdd("POST", "post", "create", []common.Parameter{body, dryRun, fieldManager, fieldValid}, subObj, subObj, http.StatusOK, http.StatusCreated, http.StatusAccepted)
			}
		}
	}
	return routes, nil
}

// operationGroup is the group version as it appears in operation IDs: "CoreV1",
// "AppsV1", "RbacAuthorizationV1", "CertificatesV1".
func operationGroup(gv schema.GroupVersion) string {
	group := "core"
	if gv.Group != "" {
		group = strings.TrimSuffix(gv.Group, ".k8s.io")
	}
	var b strings.Builder
	for _, part := range strings.FieldsFunc(group, func(r rune) bool { return r == '.' || r == '-' }) {
		b.WriteString(upperFirst(part))
	}
	b.WriteString(upperFirst(gv.Version))
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
