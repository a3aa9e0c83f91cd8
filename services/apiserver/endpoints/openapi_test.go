package endpoints

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/spec3"

	"skiff.dev/services/apiserver/openapi"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/coordination/lease"
	"skiff.dev/services/apiserver/registry/core/namespace"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/rest"
)

// served is d's resource as the apiserver installs it, over a Store with no storage
// beneath: building OpenAPI never reads or writes.
func served(t testing.TB, d registry.Descriptor) Resource {
	t.Helper()
	store := d.NewStore(nil)
	var storage rest.Storage = store
	var subs map[string]Subresource
	if d.REST != nil {
		var err error
		if storage, subs, err = d.REST(store, nil); err != nil {
			t.Fatal(err)
		}
	}
	return Resource{Name: d.Resource, Kind: d.Kind, Namespaced: d.Namespaced(), Storage: storage, Subresources: subs}
}

// testOpenAPI serves pods (with their subresources), namespaces and leases, as the
// apiserver does.
func testOpenAPI(t testing.TB) *openAPI {
	t.Helper()
	core := &APIGroupVersion{GroupVersion: corev1.SchemeGroupVersion, Resources: []Resource{
		served(t, pod.NewDescriptor(nil)), served(t, namespace.Descriptor),
	}}
	coordination := &APIGroupVersion{GroupVersion: coordinationv1.SchemeGroupVersion, Resources: []Resource{
		served(t, lease.Descriptor),
	}}
	o := newOpenAPI([]*APIGroupVersion{core, coordination}, openapi.GetOpenAPIDefinitions)
	o.docsOnce.Do(o.build)
	if o.docsErr != nil {
		t.Fatal(o.docsErr)
	}
	return o
}

func TestOpenAPILeavesOutAResourceWithoutSchema(t *testing.T) {
	withoutPod := func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		defs := openapi.GetOpenAPIDefinitions(ref)
		delete(defs, "io.k8s.api.core.v1.Pod")
		return defs
	}
	o := newOpenAPI(testOpenAPI(t).gvs, withoutPod)
	o.docsOnce.Do(o.build)
	if o.docsErr != nil {
		t.Fatalf("one resource without a schema failed every document: %v", o.docsErr)
	}
	doc := document(t, o, "api/v1")
	if doc.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}"] != nil {
		t.Error("pods are served in OpenAPI without their schema")
	}
	if doc.Paths.Paths["/api/v1/namespaces/{name}"] == nil {
		t.Error("namespaces are missing too")
	}
}

func document(t *testing.T, o *openAPI, path string) *spec3.OpenAPI {
	t.Helper()
	doc := &spec3.OpenAPI{}
	if err := json.Unmarshal(o.docs[path], doc); err != nil {
		t.Fatalf("document %s: %v", path, err)
	}
	return doc
}

func TestOpenAPIIndexAddressesEachDocumentByItsHash(t *testing.T) {
	o := testOpenAPI(t)
	var index struct {
		Paths map[string]struct{ ServerRelativeURL string }
	}
	if err := json.Unmarshal(o.index, &index); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"api/v1", "apis/coordination.k8s.io/v1"} {
		sum := sha512.Sum512(o.docs[path])
		want := "/openapi/v3/" + path + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))
		if got := index.Paths[path].ServerRelativeURL; got != want {
			t.Errorf("index %s = %q, want %q", path, got, want)
		}
	}
}

func TestOpenAPIDocumentsAnswerIfNoneMatchWithNotModified(t *testing.T) {
	o := testOpenAPI(t)
	for _, tc := range []struct {
		name  string
		serve http.HandlerFunc
		path  string
	}{
		{"index", o.serveIndex, "/openapi/v3"},
		{"document", o.serveDocument, "/openapi/v3/api/v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := httptest.NewRecorder()
			tc.serve(first, httptest.NewRequest("GET", tc.path, nil))
			etag := first.Header().Get("Etag")
			if first.Code != http.StatusOK || etag == "" || first.Body.Len() == 0 {
				t.Fatalf("GET %s: %d, ETag %q, %d bytes", tc.path, first.Code, etag, first.Body.Len())
			}
			req := httptest.NewRequest("GET", tc.path, nil)
			req.Header.Set("If-None-Match", etag)
			again := httptest.NewRecorder()
			tc.serve(again, req)
			if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
				t.Errorf("GET with If-None-Match: %d with %d bytes, want 304 and none", again.Code, again.Body.Len())
			}
		})
	}
}

func TestOpenAPISchemasCarryDescriptionsAndKinds(t *testing.T) {
	o := testOpenAPI(t)
	for _, tc := range []struct {
		doc, model string
		gvk        metav1.GroupVersionKind
	}{
		{"api/v1", "io.k8s.api.core.v1.Pod", metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{"api/v1", "io.k8s.api.core.v1.Binding", metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}},
		{"apis/coordination.k8s.io/v1", "io.k8s.api.coordination.v1.Lease", metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			schema := document(t, o, tc.doc).Components.Schemas[tc.model]
			if schema == nil {
				t.Fatalf("%s has no schema %s", tc.doc, tc.model)
			}
			if schema.Description == "" || schema.Properties["metadata"].Description == "" {
				t.Errorf("schema %s lacks the Go doc comments as descriptions", tc.model)
			}
			data, _ := json.Marshal(schema.Extensions["x-kubernetes-group-version-kind"])
			var gvks []metav1.GroupVersionKind
			if err := json.Unmarshal(data, &gvks); err != nil || len(gvks) != 1 || gvks[0] != tc.gvk {
				t.Errorf("x-kubernetes-group-version-kind = %s, want [%v]", data, tc.gvk)
			}
		})
	}
	doc := document(t, o, "api/v1")
	// What a Pod references is there too, e.g. Container and ObjectMeta.
	for _, model := range []string{"io.k8s.api.core.v1.Container", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "io.k8s.apimachinery.pkg.api.resource.Quantity"} {
		if doc.Components.Schemas[model] == nil {
			t.Errorf("api/v1 lacks %s", model)
		}
	}
	if doc.Components.Schemas["io.k8s.api.coordination.v1.Lease"] != nil {
		t.Error("api/v1 holds the Lease schema of another group")
	}
}

func TestOpenAPIOperations(t *testing.T) {
	doc := document(t, testOpenAPI(t), "api/v1")
	ops := func(path string) map[string]*spec3.Operation {
		p := doc.Paths.Paths[path]
		if p == nil {
			return nil
		}
		return map[string]*spec3.Operation{"get": p.Get, "post": p.Post, "put": p.Put, "patch": p.Patch, "delete": p.Delete}
	}
	for _, tc := range []struct {
		name, path, method, operationID, action, kind string
		params                                        []string // query parameters the operation must list
	}{
		{"patch carries what kubectl's query-param verifier looks for", "/api/v1/namespaces/{namespace}/pods/{name}", "patch", "patchCoreV1NamespacedPod", "patch", "Pod", []string{"fieldValidation", "fieldManager", "force", "dryRun"}},
		{"create", "/api/v1/namespaces/{namespace}/pods", "post", "createCoreV1NamespacedPod", "post", "Pod", []string{"fieldValidation", "dryRun"}},
		{"delete collection", "/api/v1/namespaces/{namespace}/pods", "delete", "deleteCoreV1CollectionNamespacedPod", "deletecollection", "Pod", []string{"labelSelector", "fieldSelector", "dryRun"}},
		{"list across namespaces", "/api/v1/pods", "get", "listCoreV1PodForAllNamespaces", "list", "Pod", []string{"labelSelector", "watch"}},
		{"status subresource", "/api/v1/namespaces/{namespace}/pods/{name}/status", "patch", "patchCoreV1NamespacedPodStatus", "patch", "Pod", []string{"fieldValidation"}},
		{"binding subresource", "/api/v1/namespaces/{namespace}/pods/{name}/binding", "post", "createCoreV1NamespacedPodBinding", "post", "Binding", nil},
		{"cluster-scoped resource", "/api/v1/namespaces/{name}", "put", "replaceCoreV1Namespace", "put", "Namespace", []string{"fieldValidation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := ops(tc.path)[tc.method]
			if op == nil {
				t.Fatalf("no %s %s", tc.method, tc.path)
			}
			if op.OperationId != tc.operationID {
				t.Errorf("operationId %q, want %q", op.OperationId, tc.operationID)
			}
			if op.Extensions["x-kubernetes-action"] != tc.action {
				t.Errorf("x-kubernetes-action %v, want %s", op.Extensions["x-kubernetes-action"], tc.action)
			}
			if gvk, _ := op.Extensions["x-kubernetes-group-version-kind"].(map[string]interface{}); gvk["kind"] != tc.kind {
				t.Errorf("x-kubernetes-group-version-kind %v, want kind %s", op.Extensions["x-kubernetes-group-version-kind"], tc.kind)
			}
			listed := map[string]bool{}
			for _, p := range op.Parameters {
				if p.In == "query" {
					listed[p.Name] = true
				}
			}
			for _, p := range doc.Paths.Paths[tc.path].Parameters {
				if p.In == "query" {
					listed[p.Name] = true
				}
			}
			for _, want := range tc.params {
				if !listed[want] {
					t.Errorf("query parameter %s missing; has %v", want, listed)
				}
			}
		})
	}
	if ops("/api/v1/namespaces")["delete"] != nil {
		t.Error("namespaces offer deletecollection, which kube-apiserver does not serve")
	}
}

func TestOpenAPITypeConverterKnowsEveryServedKind(t *testing.T) {
	tc, err := testOpenAPI(t).TypeConverter()
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := tc.ObjectToTyped(p); err != nil {
		t.Errorf("Pod: %v", err)
	}
	l := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}}
	if _, err := tc.ObjectToTyped(l); err != nil {
		t.Errorf("Lease: %v", err)
	}
}
