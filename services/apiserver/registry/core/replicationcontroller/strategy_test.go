package replicationcontroller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func valid() *corev1.ReplicationController {
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ReplicationControllerSpec{
			Selector: map[string]string{"app": "web"},
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

func TestPrepareForCreateDefaultsAsCoreV1(t *testing.T) {
	t.Run("selector, labels and replicas from the template", func(t *testing.T) {
		rc := valid()
		rc.Spec.Selector = nil
		rc.Status.Replicas = 7
		Strategy{}.PrepareForCreate(context.Background(), rc)
		want := map[string]string{"app": "web", "tier": "front"}
		switch {
		case !equal(rc.Spec.Selector, want) || !equal(rc.Labels, want):
			t.Errorf("selector %v labels %v, want both %v", rc.Spec.Selector, rc.Labels, want)
		case *rc.Spec.Replicas != 1:
			t.Errorf("replicas %d, want 1", *rc.Spec.Replicas)
		case rc.Status.Replicas != 0 || rc.Generation != 1:
			t.Errorf("status not cleared or generation not 1: %+v %d", rc.Status, rc.Generation)
		case rc.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || rc.Spec.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways:
			t.Errorf("pod template not defaulted: %+v", rc.Spec.Template.Spec)
		}
	})
	t.Run("a given selector and labels are kept", func(t *testing.T) {
		rc := valid()
		rc.Labels = map[string]string{"owner": "me"}
		rc.Spec.Replicas = ptr.To(int32(0))
		Strategy{}.PrepareForCreate(context.Background(), rc)
		if !equal(rc.Spec.Selector, map[string]string{"app": "web"}) || !equal(rc.Labels, map[string]string{"owner": "me"}) || *rc.Spec.Replicas != 0 {
			t.Errorf("selector %v labels %v replicas %d", rc.Spec.Selector, rc.Labels, *rc.Spec.Replicas)
		}
	})
	t.Run("no template, nothing to default from", func(t *testing.T) {
		rc := valid()
		rc.Spec.Selector, rc.Spec.Template = nil, nil
		Strategy{}.PrepareForCreate(context.Background(), rc)
		if rc.Spec.Selector != nil || rc.Labels != nil {
			t.Errorf("selector %v labels %v", rc.Spec.Selector, rc.Labels)
		}
	})
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestValidate pins kube's 422 wording for each rule of ValidateReplicationController.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*corev1.ReplicationController)
		wantErr string // "" means valid
	}{
		{name: "valid", mutate: func(*corev1.ReplicationController) {}},
		{name: "zero replicas", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Replicas = ptr.To(int32(0)) }},
		{name: "selector and template labels both empty", mutate: func(rc *corev1.ReplicationController) {
			rc.Spec.Selector, rc.Spec.Template.Labels = nil, nil
		}, wantErr: "spec.selector: Required value"},
		{name: "selector must match the template", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Selector = map[string]string{"app": "db"} },
			wantErr: "spec.template.metadata.labels: Invalid value: {\"app\":\"web\",\"tier\":\"front\"}: `selector` does not match template `labels`"},
		{name: "negative replicas", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Replicas = ptr.To(int32(-1)) },
			wantErr: "spec.replicas: Invalid value: -1: must be greater than or equal to 0"},
		{name: "negative minReadySeconds", mutate: func(rc *corev1.ReplicationController) { rc.Spec.MinReadySeconds = -1 },
			wantErr: "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"},
		{name: "template required", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Template = nil },
			wantErr: "spec.template: Required value"},
		{name: "restartPolicy Always only", mutate: func(rc *corev1.ReplicationController) {
			rc.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		},
			wantErr: "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""},
		{name: "no activeDeadlineSeconds", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To(int64(5)) },
			wantErr: "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported"},
		{name: "a valid pod template", mutate: func(rc *corev1.ReplicationController) { rc.Spec.Template.Spec.Containers[0].Image = "" },
			wantErr: "spec.template.spec.containers[0].image: Required value"},
		{name: "a DNS subdomain name", mutate: func(rc *corev1.ReplicationController) { rc.Name = "Web" }, wantErr: "metadata.name: Invalid value: \"Web\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := valid()
			tc.mutate(rc)
			Strategy{}.PrepareForCreate(context.Background(), rc)
			errs := Strategy{}.Validate(context.Background(), rc)
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
	old.ResourceVersion = "1"
	old.Status.Replicas = 3

	t.Run("a spec change bumps the generation and keeps status", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Status = corev1.ReplicationControllerStatus{}
		rc.Spec.Replicas = ptr.To(int32(4))
		Strategy{}.PrepareForUpdate(context.Background(), rc, old)
		if rc.Generation != 2 || rc.Status.Replicas != 3 {
			t.Errorf("generation %d status %+v", rc.Generation, rc.Status)
		}
	})
	t.Run("a label change keeps the generation", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Labels = map[string]string{"tier": "front"}
		Strategy{}.PrepareForUpdate(context.Background(), rc, old)
		if rc.Generation != 1 {
			t.Errorf("generation %d, want 1", rc.Generation)
		}
	})
	t.Run("the selector may change, as kube allows for ReplicationControllers", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Spec.Selector = map[string]string{"app": "web", "tier": "front"}
		Strategy{}.PrepareForUpdate(context.Background(), rc, old)
		if errs := (Strategy{}).ValidateUpdate(context.Background(), rc, old); len(errs) != 0 {
			t.Errorf("got %v", errs)
		}
	})
	t.Run("an update is validated as a create", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Spec.Selector = map[string]string{"app": "db"}
		if errs := (Strategy{}).ValidateUpdate(context.Background(), rc, old); !strings.Contains(errs.ToAggregate().Error(), "`selector` does not match template `labels`") {
			t.Errorf("got %v", errs)
		}
	})
	t.Run("a status write keeps the spec", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Spec.Replicas = ptr.To(int32(9))
		rc.Status = corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1, ObservedGeneration: 1}
		StatusStrategy{}.PrepareForUpdate(context.Background(), rc, old)
		if *rc.Spec.Replicas != 1 || rc.Status.Replicas != 2 {
			t.Errorf("spec %d status %+v", *rc.Spec.Replicas, rc.Status)
		}
		if errs := (StatusStrategy{}).ValidateUpdate(context.Background(), rc, old); len(errs) != 0 {
			t.Errorf("got %v", errs)
		}
	})
}

func TestValidateStatusUpdate(t *testing.T) {
	old := valid()
	Strategy{}.PrepareForCreate(context.Background(), old)
	old.ResourceVersion = "1"
	for _, tc := range []struct {
		name    string
		status  corev1.ReplicationControllerStatus
		wantErr string
	}{
		{"counts in order", corev1.ReplicationControllerStatus{Replicas: 3, FullyLabeledReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 1}, ""},
		{"negative replicas", corev1.ReplicationControllerStatus{Replicas: -1}, "status.replicas: Invalid value: -1: must be greater than or equal to 0"},
		{"more fully labeled than replicas", corev1.ReplicationControllerStatus{Replicas: 1, FullyLabeledReplicas: 2}, "status.fullyLabeledReplicas: Invalid value: 2: cannot be greater than status.replicas"},
		{"more ready than replicas", corev1.ReplicationControllerStatus{Replicas: 1, ReadyReplicas: 2}, "status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas"},
		{"more available than ready", corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 2}, "status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas"},
		{"negative observedGeneration", corev1.ReplicationControllerStatus{ObservedGeneration: -1}, "status.observedGeneration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := old.DeepCopy()
			rc.Status = tc.status
			errs := StatusStrategy{}.ValidateUpdate(context.Background(), rc, old)
			if tc.wantErr == "" && len(errs) != 0 || tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestGetAttrsSelectsOnStatusReplicas(t *testing.T) {
	rc := valid()
	rc.Status.Replicas = 2
	_, f, err := Strategy{}.GetAttrs(rc)
	if err != nil || f["status.replicas"] != "2" || f["metadata.name"] != "web" || f["metadata.namespace"] != "default" {
		t.Errorf("fields %v err %v", f, err)
	}
}

func TestTableRow(t *testing.T) {
	rc := valid()
	Strategy{}.PrepareForCreate(context.Background(), rc)
	rc.Spec.Replicas = ptr.To(int32(3))
	rc.Status = corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1}
	row := Strategy{}.TableRow(rc)
	if row[0] != "web" || row[1] != int64(3) || row[2] != int64(2) || row[3] != int64(1) || row[5] != "c" || row[6] != "busybox" || row[7] != "app=web" {
		t.Errorf("row %v", row)
	}
	if n := len(Strategy{}.TableColumns()); len(row) != n {
		t.Errorf("%d cells for %d columns", len(row), n)
	}
	var names []string
	for _, c := range (Strategy{}).TableColumns() {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "Name Desired Current Ready Age Containers Images Selector" {
		t.Errorf("columns %s", got)
	}
}

func TestScaleSelectorIsTheSelectorsString(t *testing.T) {
	rc := valid()
	rc.Spec.Selector = map[string]string{"tier": "front", "app": "web"}
	rc.Spec.Replicas = ptr.To(int32(2))
	rc.Status.Replicas = 1
	spec, status, sel := Scalable{}.Replicas(rc)
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || spec != 2 || status != 1 || s.String() != "app=web,tier=front" {
		t.Errorf("spec %d status %d selector %v err %v", spec, status, s, err)
	}
	Scalable{}.SetReplicas(rc, 5)
	if *rc.Spec.Replicas != 5 {
		t.Errorf("replicas %d", *rc.Spec.Replicas)
	}
}
