package apiserver_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// newRC is a ReplicationController that leaves its selector and replicas to defaulting.
func newRC(name string) *corev1.ReplicationController {
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// TestReplicationControllersServed covers v1 replicationcontrollers over HTTP as the
// conformance suite and kubectl use them: core/v1 defaulting, 422 in kube's words, the
// generation, replicationcontrollers/scale and /status, the status.replicas field
// selector, strategic merge patch, server-side apply, watch, discovery and v1's orphaning
// delete default.
func TestReplicationControllersServed(t *testing.T) {
	cfg := controlplanetest.Start(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	rcs := cs.CoreV1().ReplicationControllers("default")

	w, err := rcs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	rc, err := rcs.Create(ctx, newRC("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Spec.Selector["app"] != "web" || rc.Labels["app"] != "web" || *rc.Spec.Replicas != 1 || rc.Generation != 1 ||
		rc.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Fatalf("defaults not applied: labels %v spec %+v generation %d", rc.Labels, rc.Spec, rc.Generation)
	}
	select {
	case ev := <-w.ResultChan():
		if got, ok := ev.Object.(*corev1.ReplicationController); ev.Type != watch.Added || !ok || got.Name != "web" {
			t.Errorf("watch: %s %T", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("no watch event for the create")
	}

	t.Run("422 in kube's words", func(t *testing.T) {
		bad := newRC("bad")
		bad.Spec.Selector = map[string]string{"app": "other"}
		_, err := rcs.Create(ctx, bad, metav1.CreateOptions{})
		want := "ReplicationController \"bad\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"bad\"}: `selector` does not match template `labels`"
		if !apierrors.IsInvalid(err) || err.Error() != want {
			t.Errorf("got %v, want 422 %q", err, want)
		}
		noTemplate := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
		_, err = rcs.Create(ctx, noTemplate, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.selector: Required value") || !strings.Contains(err.Error(), "spec.template: Required value") {
			t.Errorf("no template: got %v", err)
		}
	})

	t.Run("scale subresource", func(t *testing.T) {
		scale, err := rcs.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if scale.Spec.Replicas != 1 || scale.Status.Selector != "app=web" {
			t.Fatalf("scale: %+v", scale)
		}
		scale.Spec.Replicas = 3
		if _, err := rcs.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// kubectl scale sends a merge patch to the scale subresource.
		if _, err := rcs.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatal(err)
		}
		got, err := rcs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil || *got.Spec.Replicas != 2 || got.Generation != 3 {
			t.Fatalf("after scaling: err %v replicas %d generation %d, want 2 and 3", err, *got.Spec.Replicas, got.Generation)
		}
		scale.Spec.Replicas = -1
		scale.ResourceVersion = ""
		if _, err := rcs.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("negative scale: got %v, want 422", err)
		}
	})

	t.Run("status subresource and the status.replicas field selector", func(t *testing.T) {
		got, err := rcs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Spec.Replicas = ptr.To(int32(9))
		got.Status = corev1.ReplicationControllerStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 1, ObservedGeneration: got.Generation}
		st, err := rcs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.Replicas != 2 || *st.Spec.Replicas != 2 {
			t.Errorf("status write: status %+v replicas %d", st.Status, *st.Spec.Replicas)
		}
		// The conformance suite reads replicationcontrollers/status too.
		obj, err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("replicationcontrollers").Name("web").SubResource("status").Do(ctx).Get()
		if got, ok := obj.(*corev1.ReplicationController); err != nil || !ok || got.Status.Replicas != 2 {
			t.Errorf("get replicationcontrollers/status: %T %v", obj, err)
		}
		st.Status.ReadyReplicas = 3
		if _, err := rcs.UpdateStatus(ctx, st, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("readyReplicas above replicas: got %v, want 422", err)
		}
		for sel, want := range map[string]int{"status.replicas=2": 1, "status.replicas=0": 0, "status.replicas!=0": 1} {
			list, err := rcs.List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil || len(list.Items) != want {
				t.Errorf("fieldSelector %s: err %v, %d items, want %d", sel, err, len(list.Items), want)
			}
		}
	})

	t.Run("strategic merge patch keeps the other containers", func(t *testing.T) {
		patch := `{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"nginx"}]}}}}`
		got, err := rcs.Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got.Spec.Template.Spec.Containers); n != 2 {
			t.Errorf("%d containers after a strategic merge patch, want 2", n)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		ac := corev1ac.ReplicationController("applied", "default").WithSpec(corev1ac.ReplicationControllerSpec().
			WithReplicas(0).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(map[string]string{"app": "applied"}).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("c").WithImage("busybox:1.36")))))
		got, err := rcs.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "tester"})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Selector["app"] != "applied" || *got.Spec.Replicas != 0 || len(got.ManagedFields) == 0 || got.ManagedFields[0].Manager != "tester" {
			t.Errorf("applied: selector %v replicas %d managedFields %+v", got.Spec.Selector, *got.Spec.Replicas, got.ManagedFields)
		}
	})

	t.Run("discovery: rc, category all, scale as autoscaling/v1 Scale", func(t *testing.T) {
		list, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerResourcesForGroupVersion("v1")
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]metav1.APIResource{}
		for _, r := range list.APIResources {
			found[r.Name] = r
		}
		rcRes, scale, tmpl := found["replicationcontrollers"], found["replicationcontrollers/scale"], found["podtemplates"]
		if !slices.Equal(rcRes.ShortNames, []string{"rc"}) || !slices.Equal(rcRes.Categories, []string{"all"}) || rcRes.Kind != "ReplicationController" || !rcRes.Namespaced {
			t.Errorf("replicationcontrollers: %+v", rcRes)
		}
		if scale.Group != autoscalingv1.GroupName || scale.Version != "v1" || scale.Kind != "Scale" {
			t.Errorf("replicationcontrollers/scale: %+v", scale)
		}
		if _, ok := found["replicationcontrollers/status"]; !ok {
			t.Error("no replicationcontrollers/status")
		}
		if tmpl.Kind != "PodTemplate" || !tmpl.Namespaced || !slices.Contains(tmpl.Verbs, "deletecollection") {
			t.Errorf("podtemplates: %+v", tmpl)
		}
	})

	t.Run("a v1 delete without a policy orphans, as kube's does", func(t *testing.T) {
		if err := rcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := rcs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil || !slices.Equal(got.Finalizers, []string{metav1.FinalizerOrphanDependents}) {
			t.Fatalf("err %v finalizers %v: want the object held by the orphan finalizer", err, got.Finalizers)
		}
		if err := rcs.Delete(ctx, "applied", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		if _, err := rcs.Get(ctx, "applied", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after a background delete: %v, want 404", err)
		}
	})
}

// TestPodTemplatesServed covers v1 podtemplates: create with defaults, 422, list,
// patch, delete collection.
func TestPodTemplatesServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	templates := cs.CoreV1().PodTemplates("default")
	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one", Labels: map[string]string{"set": "a"}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
		},
	}
	got, err := templates.Create(ctx, tmpl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || got.Generation != 1 {
		t.Errorf("defaults: restartPolicy %q generation %d", got.Template.Spec.RestartPolicy, got.Generation)
	}
	empty := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}
	if _, err := templates.Create(ctx, empty, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		err.Error() != `PodTemplate "empty" is invalid: template.spec.containers: Required value` {
		t.Errorf("an empty template: got %v", err)
	}
	tmpl.Name = "two"
	if _, err := templates.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patched, err := templates.Patch(ctx, "one", types.StrategicMergePatchType, []byte(`{"template":{"metadata":{"labels":{"v":"2"}}}}`), metav1.PatchOptions{})
	if err != nil || patched.Template.Labels["v"] != "2" || patched.Template.Labels["app"] != "web" || patched.Generation != 2 {
		t.Fatalf("patch: err %v labels %v generation %d", err, patched.Template.Labels, patched.Generation)
	}
	code, status, body := do(t, srv.HTTPClient(), http.MethodDelete, srv.URL+"/api/v1/namespaces/default/podtemplates?labelSelector=set%3Da", "", "")
	if code != http.StatusOK {
		t.Fatalf("delete collection: %d %v %s", code, status, body)
	}
	list, err := templates.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("after delete collection: err %v, %d left", err, len(list.Items))
	}
}
