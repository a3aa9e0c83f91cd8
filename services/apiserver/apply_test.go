package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

const applyContentType = "application/apply-patch+yaml"

// applyPod is an apply configuration of pod "web" with one container running image.
func applyPod(image string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"` + image + `"}]}}`
}

// owners maps each manager in managedFields to its operation.
func owners(p *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, f := range p.ManagedFields {
		m[f.Manager] = string(f.Operation)
	}
	return m
}

func TestServerSideApply(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	url := srv.URL + "/api/v1/namespaces/default/pods/web"
	getPod := func() *corev1.Pod {
		t.Helper()
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Apply creates a missing object.
	code, _, body := do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=alice", applyContentType, applyPod("busybox:1.36"))
	if code != http.StatusCreated {
		t.Fatalf("apply of a missing pod: %d %s, want 201", code, body)
	}
	if got := owners(getPod()); got["alice"] != "Apply" {
		t.Errorf("managedFields %v, want alice's Apply", got)
	}

	// Applying the same configuration again changes nothing and succeeds.
	if code, status, _ := do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=alice", applyContentType, applyPod("busybox:1.36")); code != http.StatusOK {
		t.Fatalf("re-apply: %d %v", code, status)
	}

	// Another manager changing alice's field conflicts, in kube's words.
	code, status, _ := do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=bob", applyContentType, applyPod("busybox:1.37"))
	wantMsg := `Apply failed with 1 conflict: conflict with "alice": .spec.containers[name="c"].image`
	if code != http.StatusConflict || status.Reason != metav1.StatusReasonConflict || status.Message != wantMsg {
		t.Fatalf("conflicting apply: %d %+v, want 409 %q", code, status, wantMsg)
	}
	if len(status.Details.Causes) != 1 || status.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict {
		t.Errorf("conflict causes %+v, want one FieldManagerConflict", status.Details)
	}
	if img := getPod().Spec.Containers[0].Image; img != "busybox:1.36" {
		t.Errorf("a conflicting apply changed the image to %s", img)
	}

	// force=true takes ownership.
	if code, status, _ := do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=bob&force=true", applyContentType, applyPod("busybox:1.37")); code != http.StatusOK {
		t.Fatalf("forced apply: %d %v", code, status)
	}
	p := getPod()
	if p.Spec.Containers[0].Image != "busybox:1.37" || owners(p)["bob"] != "Apply" {
		t.Errorf("after a forced apply: image %s, managers %v; want bob's busybox:1.37", p.Spec.Containers[0].Image, owners(p))
	}
	// alice no longer conflicts with bob's image: she lost it; her apply of the old
	// image now conflicts with bob.
	_, status, _ = do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=alice", applyContentType, applyPod("busybox:1.36"))
	if status == nil || !strings.Contains(status.Message, `conflict with "bob"`) {
		t.Errorf("alice's apply after bob forced: %+v, want a conflict with bob", status)
	}

	// Status is reset on the main resource: an apply that sets it owns none of it.
	withStatus := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"status":{"message":"mine"}}`
	if code, status, _ := do(t, srv.HTTPClient(), "PATCH", url+"?fieldManager=carol", applyContentType, withStatus); code != http.StatusOK {
		t.Fatalf("apply with status: %d %v", code, status)
	}
	for _, f := range getPod().ManagedFields {
		if f.Manager == "carol" && strings.Contains(string(f.FieldsV1.Raw), "f:status") {
			t.Errorf("carol owns status through the main resource: %s", f.FieldsV1.Raw)
		}
	}

	// client-go's typed Apply.
	ac := corev1ac.Pod("web", "default").WithLabels(map[string]string{"tier": "web"})
	applied, err := cs.CoreV1().Pods("default").Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "labeler"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Labels["tier"] != "web" || applied.Spec.Containers[0].Image != "busybox:1.37" {
		t.Errorf("typed apply: labels %v image %s", applied.Labels, applied.Spec.Containers[0].Image)
	}

	// ApplyStatus applies to pods/status: status changes, spec stays the stored one.
	statusApply := corev1ac.Pod("web", "default").
		WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("c").WithImage("ignored"))).
		WithStatus(corev1ac.PodStatus().WithMessage("applied"))
	applied, err = cs.CoreV1().Pods("default").ApplyStatus(ctx, statusApply, metav1.ApplyOptions{FieldManager: "status-writer", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Status.Message != "applied" || applied.Spec.Containers[0].Image != "busybox:1.37" {
		t.Errorf("status apply: message %q image %s, want the message and the stored image", applied.Status.Message, applied.Spec.Containers[0].Image)
	}
	for _, f := range applied.ManagedFields {
		if f.Manager == "status-writer" && (f.Subresource != "status" || strings.Contains(string(f.FieldsV1.Raw), "f:spec")) {
			t.Errorf("status-writer's entry %s %s, want status fields on the status subresource", f.Subresource, f.FieldsV1.Raw)
		}
	}
}

func TestApplyRequests(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	url := srv.URL + "/api/v1/namespaces/default/pods/web"
	for _, tc := range []struct {
		name, query, contentType, body string
		code                           int
		message                        string
	}{
		{"apply needs a fieldManager", "", applyContentType, applyPod("busybox"), http.StatusUnprocessableEntity, "fieldManager: Required value: is required for apply patch"},
		{"force is only for apply", "?force=true", "application/merge-patch+json", `{}`, http.StatusUnprocessableEntity, "force: Forbidden: may not be specified for non-apply patch"},
		{"an unknown field is refused", "?fieldManager=a", applyContentType, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"bogus":1}}`, http.StatusBadRequest, "field not declared in schema"},
		{"the name must match the URL", "?fieldManager=a", applyContentType, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"other"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, http.StatusBadRequest, "does not match the name on the URL"},
		{"a duplicate field is refused under Strict", "?fieldManager=a&fieldValidation=Strict", applyContentType, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  name: web\n", http.StatusBadRequest, "error strict decoding YAML"},
		{"malformed YAML", "?fieldManager=a", applyContentType, "{", http.StatusBadRequest, "error decoding YAML"},
		{"dryRun must be All", "?fieldManager=a&dryRun=Some", applyContentType, applyPod("busybox"), http.StatusUnprocessableEntity, "dryRun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, status, body := do(t, srv.HTTPClient(), "PATCH", url+tc.query, tc.contentType, tc.body)
			if code != tc.code || status == nil || !strings.Contains(status.Message, tc.message) {
				t.Errorf("%d %s, want %d with %q", code, body, tc.code, tc.message)
			}
		})
	}
}

func TestDryRunStoresNothing(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("live"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkUnchanged := func(t *testing.T) {
		t.Helper()
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != "live" || list.Items[0].Labels["dry"] != "" || list.Items[0].DeletionTimestamp != nil {
			t.Errorf("after a dry run the pods are %+v, want live unchanged", list.Items)
		}
	}
	base := srv.URL + "/api/v1/namespaces/default/pods"
	for _, tc := range []struct {
		name, method, url, contentType, body string
		code                                 int
	}{
		{"create", "POST", base + "?dryRun=All", "application/json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, http.StatusCreated},
		{"apply of a missing object", "PATCH", base + "/new?dryRun=All&fieldManager=a", applyContentType, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[{"name":"c","image":"x"}]}}`, http.StatusCreated},
		{"apply", "PATCH", base + "/live?dryRun=All&fieldManager=a", applyContentType, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"live","labels":{"dry":"run"}}}`, http.StatusOK},
		{"merge patch", "PATCH", base + "/live?dryRun=All", "application/merge-patch+json", `{"metadata":{"labels":{"dry":"run"}}}`, http.StatusOK},
		{"delete", "DELETE", base + "/live?dryRun=All", "", "", http.StatusOK},
		{"delete collection", "DELETE", base + "?dryRun=All", "", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, status, body := do(t, srv.HTTPClient(), tc.method, tc.url, tc.contentType, tc.body); code != tc.code {
				t.Fatalf("%d %v %s, want %d", code, status, body, tc.code)
			}
			checkUnchanged(t)
		})
	}
	t.Run("update", func(t *testing.T) {
		live, err := cs.CoreV1().Pods("default").Get(ctx, "live", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.Labels["dry"] = "run"
		if _, err := cs.CoreV1().Pods("default").Update(ctx, live, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		checkUnchanged(t)
	})
}

func TestDeleteCollectionOverHTTP(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		p := newPod(name)
		p.Labels = map[string]string{"app": map[string]string{"a": "web", "b": "web", "c": "db"}[name]}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=web"}); err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "c" {
		t.Errorf("left %d pods, want only c (app=db)", len(list.Items))
	}
	// An unknown field in the selector is refused before anything is deleted.
	err = cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.bogus=x"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("deletecollection with an unsupported field selector: %v, want 400", err)
	}
	// Nor across every namespace at once, as in kube-apiserver.
	if code, _, _ := do(t, srv.HTTPClient(), "DELETE", srv.URL+"/api/v1/pods", "", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /api/v1/pods: %d, want 405", code)
	}
	if list, _ := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
		t.Errorf("%d pods left after DELETE /api/v1/pods, want c still there", len(list.Items))
	}
	// Namespaces have no deletecollection, as in kube-apiserver.
	code, _, _ := do(t, srv.HTTPClient(), "DELETE", srv.URL+"/api/v1/namespaces", "", "")
	if code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /api/v1/namespaces: %d, want 405", code)
	}

	resources, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{}
	for _, r := range resources.APIResources {
		verbs[r.Name] = r.Verbs
	}
	for _, tc := range []struct {
		resource string
		want     bool
	}{{"pods", true}, {"secrets", true}, {"events", true}, {"pods/status", false}, {"namespaces", false}} {
		if got := slices.Contains(verbs[tc.resource], "deletecollection"); got != tc.want {
			b, _ := json.Marshal(verbs[tc.resource])
			t.Errorf("%s verbs %s: deletecollection listed = %v, want %v", tc.resource, b, got, tc.want)
		}
	}
}
