package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// widgetsCRD declares example.com/v1 Widget: a schema with an enum, a default, a CEL
// rule, a set-typed list and an unknown-field-free spec; status and scale subresources;
// printer columns; a selectable field.
func widgetsCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ShortNames: []string{"wd"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Color", Type: "string", JSONPath: ".spec.color"}},
				SelectableFields:         []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:         "object",
							XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size <= 10 || self.color != 'red'", Message: "red widgets must be small"}},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"color":    {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}},
								"size":     {Type: "integer", Minimum: ptr.To(1.0), Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
								"replicas": {Type: "integer"},
								"tags":     {Type: "array", XListType: ptr.To("set"), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
							},
						},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"replicas": {Type: "integer"}, "ready": {Type: "boolean"},
						}},
					},
				}},
			}},
		},
	}
}

func widget(name, color string, extra map[string]interface{}) *unstructured.Unstructured {
	spec := map[string]interface{}{"color": color}
	for k, v := range extra {
		spec[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]interface{}{"name": name}, "spec": spec,
	}}
}

// createEstablishedCRD creates crd and waits for its Established condition and for
// discovery to list its resource.
func createEstablishedCRD(ctx context.Context, t *testing.T, cfg *rest.Config, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	client := apiextensionsclient.NewForConfigOrDie(cfg)
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	disco := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		established := false
		for _, c := range got.Status.Conditions {
			established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
		}
		if !established {
			return false, nil
		}
		list, err := disco.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + crd.Spec.Versions[0].Name)
		return err == nil && len(list.APIResources) > 0, nil
	}); err != nil {
		t.Fatalf("%s not established and discoverable: %v", crd.Name, err)
	}
}

// TestCustomResourceLifecycle drives a CRD and its custom resources through client-go:
// names accepted and Established, defaulting, pruning under fieldValidation, schema and
// CEL validation with kube's 422 wording, status and scale subresources, field and
// label selectors, watch, server-side apply merging a set-typed list, and the CRD's
// deletion removing its objects.
func TestCustomResourceLifecycle(t *testing.T) {
	cfg := controlplanetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createEstablishedCRD(ctx, t, cfg, widgetsCRD())
	crd, err := apiextensionsclient.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crd.Status.AcceptedNames.Kind != "Widget" || crd.Status.AcceptedNames.ListKind != "WidgetList" || len(crd.Status.StoredVersions) != 1 {
		t.Errorf("status = %+v, want accepted names with WidgetList and storedVersions [v1]", crd.Status)
	}
	widgets := dynamic.NewForConfigOrDie(cfg).Resource(widgetsGVR).Namespace("default")

	t.Run("defaults and prunes", func(t *testing.T) {
		if _, err := widgets.Create(ctx, widget("strict", "blue", map[string]interface{}{"colour": "x"}), metav1.CreateOptions{FieldValidation: "Strict"}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.colour"`) {
			t.Errorf("strict create with an unknown field: %v, want 400 naming spec.colour", err)
		}
		withMeta := widget("strict", "blue", nil)
		withMeta.Object["metadata"].(map[string]interface{})["unknownMeta"] = "x"
		if _, err := widgets.Create(ctx, withMeta, metav1.CreateOptions{FieldValidation: "Strict"}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "metadata.unknownMeta"`) {
			t.Errorf("strict create with an unknown metadata field: %v, want 400 naming metadata.unknownMeta", err)
		}
		w, err := widgets.Create(ctx, widget("w1", "blue", map[string]interface{}{"colour": "x"}), metav1.CreateOptions{FieldValidation: "Ignore"})
		if err != nil {
			t.Fatal(err)
		}
		if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
			t.Errorf("spec.size = %d, want the default 3", size)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(w.Object, "spec", "colour"); found {
			t.Error("spec.colour was stored, want it pruned")
		}
		if w.GetGeneration() != 1 {
			t.Errorf("generation = %d, want 1", w.GetGeneration())
		}
	})

	t.Run("validates with kube's messages", func(t *testing.T) {
		_, err := widgets.Create(ctx, widget("bad", "purple", map[string]interface{}{"size": int64(0)}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `Widget.example.com "bad" is invalid`) ||
			!strings.Contains(err.Error(), `spec.color: Unsupported value: "purple"`) || !strings.Contains(err.Error(), "spec.size") {
			t.Errorf("invalid create: %v, want 422 on spec.color and spec.size", err)
		}
		_, err = widgets.Create(ctx, widget("huge", "red", map[string]interface{}{"size": int64(20)}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "red widgets must be small") {
			t.Errorf("create breaking the CEL rule: %v, want 422 with the rule's message", err)
		}
	})

	t.Run("status and scale subresources", func(t *testing.T) {
		w, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(w.Object, true, "status", "ready")
		_ = unstructured.SetNestedField(w.Object, "red", "spec", "color") // ignored on status
		w, err = widgets.UpdateStatus(ctx, w, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if color, _, _ := unstructured.NestedString(w.Object, "spec", "color"); color != "blue" {
			t.Errorf("a status update changed spec.color to %q", color)
		}
		if ready, _, _ := unstructured.NestedBool(w.Object, "status", "ready"); !ready || w.GetGeneration() != 1 {
			t.Errorf("status.ready = %v, generation %d; want true and 1", ready, w.GetGeneration())
		}
		// The main resource ignores status and counts spec changes.
		_ = unstructured.SetNestedField(w.Object, false, "status", "ready")
		_ = unstructured.SetNestedField(w.Object, int64(4), "spec", "size")
		if w, err = widgets.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ready, _, _ := unstructured.NestedBool(w.Object, "status", "ready"); !ready || w.GetGeneration() != 2 {
			t.Errorf("after a spec update: status.ready = %v, generation %d; want true and 2", ready, w.GetGeneration())
		}
		patched, err := widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale")
		if err != nil {
			t.Fatal(err)
		}
		if patched.GetKind() != "Scale" {
			t.Errorf("scale patch answered a %s, want Scale", patched.GetKind())
		}
		w, _ = widgets.Get(ctx, "w1", metav1.GetOptions{})
		if replicas, _, _ := unstructured.NestedInt64(w.Object, "spec", "replicas"); replicas != 5 {
			t.Errorf("spec.replicas = %d after scaling to 5", replicas)
		}
		if _, err := widgets.Create(ctx, widget("x", "blue", nil), metav1.CreateOptions{}, "status"); !apierrors.IsMethodNotSupported(err) {
			t.Errorf("create through status: %v, want 405", err)
		}
	})

	t.Run("selectors and watch", func(t *testing.T) {
		w, err := widgets.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.color=red"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := widgets.Create(ctx, widget("w2", "red", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added || ev.Object.(*unstructured.Unstructured).GetName() != "w2" {
				t.Errorf("watch event %s %v, want ADDED w2", ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("no watch event")
		}
		list, err := widgets.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
		if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "w1" {
			t.Errorf("field selector spec.color=blue: %v %v, want [w1]", list, err)
		}
		if _, err := widgets.List(ctx, metav1.ListOptions{FieldSelector: "spec.size=3"}); !apierrors.IsBadRequest(err) {
			t.Errorf("field selector on a field not selectable: %v, want 400", err)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		apply := func(manager string, tags ...interface{}) *unstructured.Unstructured {
			obj := widget("w3", "blue", map[string]interface{}{"tags": tags})
			out, err := widgets.Apply(ctx, "w3", obj, metav1.ApplyOptions{FieldManager: manager})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		apply("alice", "a", "b")
		out := apply("bob", "c")
		tags, _, _ := unstructured.NestedStringSlice(out.Object, "spec", "tags")
		if strings.Join(tags, ",") != "a,b,c" {
			t.Errorf("tags = %v, want the set a,b,c merged from two managers", tags)
		}
		if len(out.GetManagedFields()) != 2 {
			t.Errorf("managedFields = %v, want one entry per manager", out.GetManagedFields())
		}
	})

	t.Run("deleting the CRD deletes its objects", func(t *testing.T) {
		client := apiextensionsclient.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions()
		if err := client.Delete(ctx, "widgets.example.com", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.Get(ctx, "widgets.example.com", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("the CRD was not deleted: %v", err)
		}
		createEstablishedCRD(ctx, t, cfg, widgetsCRD())
		list, err := widgets.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Errorf("after re-creating the CRD: %d objects (%v), want none left", len(list.Items), err)
		}
	})
}

// TestCustomResourceDefinitionNamesConflict: a second CRD asking for a plural another
// of its group has accepted gets NamesAccepted=False and is not served.
func TestCustomResourceDefinitionNamesConflict(t *testing.T) {
	cfg := controlplanetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createEstablishedCRD(ctx, t, cfg, widgetsCRD())
	other := widgetsCRD()
	other.Name = "gadgets.example.com"
	other.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ShortNames: []string{"wd"}}
	client := apiextensionsclient.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions()
	if _, err := client.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.Get(ctx, other.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return c.Message == `"wd" is already in use`, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("NamesAccepted never went False on the shared short name: %v", err)
	}
	_, err := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).
		Namespace("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("listing the conflicting CRD's resource: %v, want 404", err)
	}
	// The CRD itself is validated by kube's rules.
	bad := widgetsCRD()
	bad.Name = "wrong.example.com"
	if _, err := client.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must be spec.names.plural+\".\"+spec.group") {
		t.Errorf("a CRD named unlike its plural and group: %v, want kube's 422", err)
	}
}
