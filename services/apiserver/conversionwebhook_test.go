package apiserver_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// converter is a conversion webhook between example.com/v1 Things (spec.hostPort
// "h:p") and v2 (spec.host and spec.port), as the conformance suite's sample webhook
// converts them.
func converter(t *testing.T, calls *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(raw.Raw); err != nil {
				t.Errorf("webhook got %s: %v", raw.Raw, err)
				return
			}
			spec, _, _ := unstructured.NestedMap(u.Object, "spec")
			switch review.Request.DesiredAPIVersion {
			case "example.com/v2":
				host, port, _ := strings.Cut(spec["hostPort"].(string), ":")
				spec = map[string]interface{}{"host": host, "port": port}
			case "example.com/v1":
				spec = map[string]interface{}{"hostPort": spec["host"].(string) + ":" + spec["port"].(string)}
			}
			u.Object["spec"] = spec
			u.SetAPIVersion(review.Request.DesiredAPIVersion)
			data, _ := u.MarshalJSON()
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtimeRaw(data))
		}
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}
}

// TestConversionWebhook: a CRD of two versions stored in v1 converts through its
// webhook: an object written in v2 is stored in v1 and read back in either version.
func TestConversionWebhook(t *testing.T) {
	var calls atomic.Int32
	server := httptest.NewTLSServer(converter(t, &calls))
	defer server.Close()
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})

	cfg := controlplanetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schemaOf := func(fields ...string) *apiextensionsv1.CustomResourceValidation {
		props := map[string]apiextensionsv1.JSONSchemaProps{}
		for _, f := range fields {
			props[f] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: props}}}}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "things.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaOf("hostPort")},
				{Name: "v2", Served: true, Schema: schemaOf("host", "port")},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To(server.URL + "/convert"), CABundle: caBundle}}},
		},
	}
	createEstablishedCRD(ctx, t, cfg, crd)
	client := dynamic.NewForConfigOrDie(cfg)
	v1 := client.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "things"}).Namespace("default")
	v2 := client.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "things"}).Namespace("default")

	thing := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v2", "kind": "Thing",
		"metadata": map[string]interface{}{"name": "t1"}, "spec": map[string]interface{}{"host": "localhost", "port": "8080"}}}
	created, err := v2.Create(ctx, thing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := unstructured.NestedString(created.Object, "spec", "host"); host != "localhost" || created.GetAPIVersion() != "example.com/v2" {
		t.Errorf("created = %v, want it answered in v2", created.Object)
	}
	got, err := v1.Get(ctx, "t1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hp, _, _ := unstructured.NestedString(got.Object, "spec", "hostPort"); hp != "localhost:8080" {
		t.Errorf("read in v1: spec = %v, want hostPort localhost:8080", got.Object["spec"])
	}
	list, err := v2.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list in v2: %v, %v", list, err)
	}
	if port, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "port"); port != "8080" {
		t.Errorf("listed in v2: spec = %v, want port 8080", list.Items[0].Object["spec"])
	}
	if calls.Load() == 0 {
		t.Error("the conversion webhook was never called")
	}

	// A webhook that cannot be reached fails the reads that need it, with kube's words.
	server.Close()
	_, err = v1.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Thing",
		"metadata": map[string]interface{}{"name": "t2"}, "spec": map[string]interface{}{"hostPort": "a:1"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a write in the storage version needs no conversion: %v", err)
	}
	if _, err := v2.Get(ctx, "t2", metav1.GetOptions{}); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "conversion webhook for example.com/v1, Kind=Thing failed") {
		t.Errorf("reading in v2 with the webhook down: %v, want 500 naming the failed conversion webhook", err)
	}
}

func runtimeRaw(data []byte) runtime.RawExtension { return runtime.RawExtension{Raw: data} }
