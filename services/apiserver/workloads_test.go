package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

func newDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// TestDeploymentServedWithScaleAndGeneration covers the deployments resource end to end
// over HTTP: kube's defaults, generation bumps on spec changes only, the scale
// subresource in autoscaling/v1, the immutable selector and status-only writes to
// deployments/status.
func TestDeploymentServedWithScaleAndGeneration(t *testing.T) {
	cfg := controlplanetest.Start(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	deployments := cs.AppsV1().Deployments("default")
	d, err := deployments.Create(ctx, newDeployment("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" || *d.Spec.RevisionHistoryLimit != 10 ||
		*d.Spec.ProgressDeadlineSeconds != 600 || d.Generation != 1 ||
		d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Fatalf("defaults not applied: %+v generation %d", d.Spec, d.Generation)
	}

	scale, err := deployments.GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Selector != "app=web" {
		t.Fatalf("scale: %+v", scale)
	}
	scale.Spec.Replicas = 5
	if _, err := deployments.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kubectl scale sends a merge patch to the scale subresource.
	if _, err := deployments.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	d, err = deployments.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 4 || d.Generation != 3 {
		t.Fatalf("after scaling: err %v replicas %d generation %d, want 4 and 3", err, *d.Spec.Replicas, d.Generation)
	}
	scale.Spec.Replicas = -1
	if _, err := deployments.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("negative scale: got %v, want 422", err)
	}

	d.Status.Replicas, d.Status.ObservedGeneration = 4, d.Generation
	d.Spec.Replicas = ptr.To(int32(9))
	st, err := deployments.UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Replicas != 4 || *st.Spec.Replicas != 4 || st.Generation != 3 {
		t.Errorf("status write changed spec or missed status: %+v gen %d", st.Status, st.Generation)
	}

	st.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
	st.Spec.Template.Labels = map[string]string{"app": "other"}
	if _, err := deployments.Update(ctx, st, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("selector change: got %v, want 422 Invalid", err)
	}

	bad := newDeployment("bad")
	bad.Spec.Template.Labels = map[string]string{"app": "nope"}
	if _, err := deployments.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("selector not matching the template: got %v, want 422 Invalid", err)
	}

	// Discovery says the scale subresource speaks autoscaling/v1 Scale, as kubectl scale
	// needs to find it.
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	list, err := dc.ServerResourcesForGroupVersion("apps/v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range list.APIResources {
		if r.Name == "deployments/scale" {
			found = r.Group == autoscalingv1.GroupName && r.Version == "v1" && r.Kind == "Scale"
		}
	}
	if !found {
		t.Errorf("deployments/scale not in discovery as autoscaling/v1 Scale: %+v", list.APIResources)
	}
}

// TestJobSelectorIsGenerated pins kube's selector generation: the template gets the
// controller-uid and job-name labels, the selector matches the uid, and a Job takes
// its template's labels.
func TestJobSelectorIsGenerated(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pi"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pi", Image: "busybox:1.36"}},
		}}},
	}
	got, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(got.UID)
	if got.Spec.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != uid ||
		got.Spec.Template.Labels["controller-uid"] != uid || got.Spec.Template.Labels["batch.kubernetes.io/job-name"] != "pi" ||
		got.Labels["job-name"] != "pi" {
		t.Fatalf("selector not generated: selector %v template labels %v labels %v", got.Spec.Selector, got.Spec.Template.Labels, got.Labels)
	}
	if *got.Spec.Completions != 1 || *got.Spec.Parallelism != 1 || *got.Spec.BackoffLimit != 6 || *got.Spec.CompletionMode != batchv1.NonIndexedCompletion {
		t.Fatalf("defaults: %+v", got.Spec)
	}
	always := job.DeepCopy()
	always.Name = "always"
	always.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, always, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("restartPolicy Always: got %v, want 422 Invalid", err)
	}
	got.Spec.Completions = ptr.To(int32(3))
	if _, err := cs.BatchV1().Jobs("default").Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("completions change: got %v, want 422 Invalid", err)
	}
}

// TestWorkloadTables pins kubectl's columns for deployments, replicasets, jobs,
// replicationcontrollers and podtemplates.
func TestWorkloadTables(t *testing.T) {
	cfg := controlplanetest.Start(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, newDeployment("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		"/apis/apps/v1/namespaces/default/deployments":      {"Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"},
		"/apis/apps/v1/namespaces/default/replicasets":      {"Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"},
		"/apis/batch/v1/namespaces/default/jobs":            {"Name", "Status", "Completions", "Duration", "Age", "Containers", "Images", "Selector"},
		"/api/v1/namespaces/default/replicationcontrollers": {"Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"},
		"/api/v1/namespaces/default/podtemplates":           {"Name", "Containers", "Images", "Pod Labels"},
	} {
		req, _ := http.NewRequest(http.MethodGet, cfg.Host+path, nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		err = json.NewDecoder(resp.Body).Decode(&table)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range table.ColumnDefinitions {
			got = append(got, c.Name)
		}
		if len(got) != len(want) {
			t.Errorf("%s: columns %v, want %v", path, got, want)
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: columns %v, want %v", path, got, want)
				break
			}
		}
	}
}
