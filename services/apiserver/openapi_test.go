package apiserver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/kube-openapi/pkg/spec3"

	"skiff.dev/services/controlplanetest"
)

// TestOpenAPICoversEveryServedResource reads /openapi/v3 as client-go (and so kubectl)
// does and checks that every resource discovery lists has a schema tagged with its kind
// and a PATCH or POST operation for it: a resource added without `make openapi` fails.
func TestOpenAPICoversEveryServedResource(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	paths, err := cs.Discovery().OpenAPIV3().Paths()
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := cs.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range lists {
		path := "apis/" + list.GroupVersion
		if !strings.Contains(list.GroupVersion, "/") {
			path = "api/" + list.GroupVersion
		}
		gv, ok := paths[path]
		if !ok {
			t.Errorf("/openapi/v3 lists no %s", path)
			continue
		}
		data, err := gv.Schema("application/json")
		if err != nil {
			t.Fatal(err)
		}
		doc := &spec3.OpenAPI{}
		if err := json.Unmarshal(data, doc); err != nil {
			t.Fatal(err)
		}
		schemaKinds, opKinds := map[string]bool{}, map[string]bool{}
		for _, s := range doc.Components.Schemas {
			gvks, _ := s.Extensions["x-kubernetes-group-version-kind"].([]interface{})
			for _, g := range gvks {
				if m, _ := g.(map[string]interface{}); m["version"] != "" {
					schemaKinds[m["kind"].(string)] = true
				}
			}
		}
		for _, p := range doc.Paths.Paths {
			for _, op := range []*spec3.Operation{p.Post, p.Patch} {
				if op == nil {
					continue
				}
				if m, ok := op.Extensions["x-kubernetes-group-version-kind"].(map[string]interface{}); ok {
					opKinds[m["kind"].(string)] = true
				}
			}
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			if !schemaKinds[r.Kind] || !opKinds[r.Kind] {
				t.Errorf("%s %s (%s): schema tagged with the kind %v, write operation %v", path, r.Name, r.Kind, schemaKinds[r.Kind], opKinds[r.Kind])
			}
		}
	}
}

// TestOpenAPIV2 reads /openapi/v2 as protobuf, as client-go's discovery (and kubectl's
// client-side validation) does.
func TestOpenAPIV2(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	doc, err := cs.Discovery().OpenAPISchema()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, def := range doc.GetDefinitions().GetAdditionalProperties() {
		if def.GetName() != "io.k8s.api.core.v1.Pod" {
			continue
		}
		found = true
		if def.GetValue().GetDescription() == "" || len(def.GetValue().GetVendorExtension()) == 0 {
			t.Errorf("Pod definition lacks its description or GVK extension: %v", def.GetValue())
		}
	}
	if !found {
		t.Error("/openapi/v2 has no io.k8s.api.core.v1.Pod definition")
	}
	ops := 0
	for _, p := range doc.GetPaths().GetPath() {
		if p.GetName() == "/api/v1/namespaces/{namespace}/pods/{name}" && p.GetValue().GetPatch() != nil {
			ops++
		}
	}
	if ops != 1 {
		t.Error("/openapi/v2 lacks PATCH /api/v1/namespaces/{namespace}/pods/{name}")
	}
}
