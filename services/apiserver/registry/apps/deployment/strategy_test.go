package deployment

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func valid() *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

func TestPrepareForCreateDefaultsAsAppsV1(t *testing.T) {
	d := valid()
	d.Status.Replicas = 7
	Strategy{}.PrepareForCreate(context.Background(), d)
	ru := d.Spec.Strategy.RollingUpdate
	switch {
	case *d.Spec.Replicas != 1, d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType,
		ru.MaxSurge.String() != "25%", ru.MaxUnavailable.String() != "25%",
		*d.Spec.RevisionHistoryLimit != 10, *d.Spec.ProgressDeadlineSeconds != 600:
		t.Errorf("defaults: %+v", d.Spec)
	case d.Status.Replicas != 0 || d.Generation != 1:
		t.Errorf("status not cleared or generation not 1: %+v %d", d.Status, d.Generation)
	case d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || d.Spec.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways:
		t.Errorf("pod template not defaulted: %+v", d.Spec.Template.Spec)
	case len(d.Spec.Template.Spec.Tolerations) != 0:
		t.Errorf("templates get no admission tolerations: %v", d.Spec.Template.Spec.Tolerations)
	}
}

func TestValidate(t *testing.T) {
	zero := intstr.FromInt32(0)
	for _, tc := range []struct {
		name    string
		mutate  func(*appsv1.Deployment)
		wantErr string // "" means valid
	}{
		{name: "valid", mutate: func(*appsv1.Deployment) {}},
		{name: "selector required", mutate: func(d *appsv1.Deployment) { d.Spec.Selector = nil }, wantErr: "spec.selector: Required value"},
		{name: "empty selector", mutate: func(d *appsv1.Deployment) { d.Spec.Selector = &metav1.LabelSelector{} }, wantErr: "empty selector is invalid"},
		{name: "selector must match template", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "x"} },
			wantErr: "`selector` does not match template `labels`"},
		{name: "restartPolicy Always only", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever },
			wantErr: "spec.template.spec.restartPolicy: Unsupported value"},
		{name: "negative replicas", mutate: func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(-1)) }, wantErr: "spec.replicas"},
		{name: "surge and unavailable both zero", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &zero}
		}, wantErr: "may not be 0 when `maxSurge` is 0"},
		{name: "Recreate with rollingUpdate", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
		}, wantErr: "may not be specified when strategy `type` is 'Recreate'"},
		{name: "deadline not above minReadySeconds", mutate: func(d *appsv1.Deployment) {
			d.Spec.MinReadySeconds, d.Spec.ProgressDeadlineSeconds = 10, ptr.To(int32(10))
		}, wantErr: "must be greater than minReadySeconds"},
		{name: "container without image", mutate: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "" },
			wantErr: "spec.template.spec.containers[0].image: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := valid()
			tc.mutate(d)
			Strategy{}.PrepareForCreate(context.Background(), d)
			errs := Strategy{}.Validate(context.Background(), d)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestPrepareForUpdate(t *testing.T) {
	old := valid()
	Strategy{}.PrepareForCreate(context.Background(), old)
	old.Status.Replicas = 3

	t.Run("a spec change bumps the generation and keeps status", func(t *testing.T) {
		d := old.DeepCopy()
		d.Status = appsv1.DeploymentStatus{}
		d.Spec.Replicas = ptr.To(int32(4))
		Strategy{}.PrepareForUpdate(context.Background(), d, old)
		if d.Generation != 2 || d.Status.Replicas != 3 {
			t.Errorf("generation %d status %+v", d.Generation, d.Status)
		}
	})
	t.Run("a label change keeps the generation", func(t *testing.T) {
		d := old.DeepCopy()
		d.Labels = map[string]string{"tier": "front"}
		Strategy{}.PrepareForUpdate(context.Background(), d, old)
		if d.Generation != 1 {
			t.Errorf("generation %d, want 1", d.Generation)
		}
	})
	t.Run("the selector is immutable", func(t *testing.T) {
		d := old.DeepCopy()
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "v": "2"}}
		d.Spec.Template.Labels = map[string]string{"app": "web", "v": "2"}
		if errs := (Strategy{}).ValidateUpdate(context.Background(), d, old); !strings.Contains(errs.ToAggregate().Error(), "field is immutable") {
			t.Errorf("got %v", errs)
		}
	})
	t.Run("a status write keeps the spec and may change annotations", func(t *testing.T) {
		d := old.DeepCopy()
		d.Spec.Replicas = ptr.To(int32(9))
		d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
		d.Status.ObservedGeneration = 1
		StatusStrategy{}.PrepareForUpdate(context.Background(), d, old)
		if *d.Spec.Replicas != 1 || d.Annotations["deployment.kubernetes.io/revision"] != "1" || d.Status.ObservedGeneration != 1 {
			t.Errorf("spec %d annotations %v status %+v", *d.Spec.Replicas, d.Annotations, d.Status)
		}
	})
}

func TestTableRow(t *testing.T) {
	d := valid()
	Strategy{}.PrepareForCreate(context.Background(), d)
	d.Spec.Replicas = ptr.To(int32(3))
	d.Status = appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2}
	row := Strategy{}.TableRow(d)
	if row[0] != "web" || row[1] != "2/3" || row[2] != int64(3) || row[3] != int64(2) || row[5] != "c" || row[6] != "busybox" || row[7] != "app=web" {
		t.Errorf("row %v", row)
	}
	if len(row) != len(Strategy{}.TableColumns()) {
		t.Errorf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
	}
}
