package endpoints

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
)

// openAPIV3 serves a small OpenAPI v3 discovery: /openapi/v3 lists one document per group
// version, and each document has a path per resource whose POST and PATCH operations
// carry x-kubernetes-group-version-kind and a fieldValidation parameter. That is exactly
// what kubectl's query-param verifier looks for before it sends fieldValidation=Strict
// (cli-runtime/pkg/resource/query_param_verifier_v3.go); without any OpenAPI, plain
// `kubectl apply -f` and `kubectl create -f` refuse to run. Schemas are not served, so
// kubectl computes apply patches from its built-in types, as it does for kinds it knows.
type openAPIV3 struct {
	index []byte
	docs  map[string][]byte // "api/v1" → document
}

func newOpenAPIV3(gvs []*APIGroupVersion) *openAPIV3 {
	o := &openAPIV3{docs: map[string][]byte{}}
	type pathRef struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}
	index := map[string]map[string]pathRef{"paths": {}}
	for _, gv := range gvs {
		prefix := "apis/" + gv.GroupVersion.String()
		if gv.GroupVersion.Group == "" {
			prefix = "api/" + gv.GroupVersion.Version
		}
		doc, _ := json.Marshal(openAPIDocument(gv, "/"+prefix))
		sum := sha512.Sum512(doc)
		o.docs[prefix] = doc
		index["paths"][prefix] = pathRef{ServerRelativeURL: "/openapi/v3/" + prefix + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	o.index, _ = json.Marshal(index)
	return o
}

// openAPIDocument builds the OpenAPI 3.0 document of one group version.
func openAPIDocument(gv *APIGroupVersion, prefix string) map[string]interface{} {
	fieldValidation := map[string]interface{}{
		"name": "fieldValidation", "in": "query", "schema": map[string]string{"type": "string"},
		"description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict.",
	}
	paths := map[string]interface{}{}
	for _, r := range gv.Resources {
		gvk := map[string]string{"group": gv.GroupVersion.Group, "version": gv.GroupVersion.Version, "kind": r.Kind}
		op := func(id string) map[string]interface{} {
			return map[string]interface{}{
				"operationId":                     id + r.Kind,
				"x-kubernetes-group-version-kind": gvk,
				"parameters":                      []interface{}{fieldValidation},
				"responses":                       map[string]interface{}{"200": map[string]string{"description": "OK"}},
			}
		}
		collection := prefix + "/" + r.Name
		if r.Namespaced {
			collection = prefix + "/namespaces/{namespace}/" + r.Name
		}
		paths[collection] = map[string]interface{}{"post": op("create")}
		paths[collection+"/{name}"] = map[string]interface{}{"put": op("replace"), "patch": op("patch")}
	}
	return map[string]interface{}{
		"openapi": "3.0.0",
		"info":    map[string]string{"title": "skiff", "version": gv.GroupVersion.String()},
		"paths":   paths,
	}
}

func (o *openAPIV3) serveIndex(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(o.index)
}

func (o *openAPIV3) serveDocument(w http.ResponseWriter, r *http.Request) {
	doc, ok := o.docs[strings.TrimPrefix(r.URL.Path, "/openapi/v3/")]
	if !ok {
		writeError(w, notFoundPath(r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("hash") != "" {
		// A document addressed by its hash never changes (kube-apiserver does the same).
		w.Header().Set("Cache-Control", "public, immutable")
	}
	_, _ = w.Write(doc)
}
