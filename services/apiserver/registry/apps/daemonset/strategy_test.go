package daemonset

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

func valid() *appsv1.DaemonSet {
	labels := map[string]string{"app": "agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

func TestPrepareForCreateDefaultsAsAppsV1(t *testing.T) {
	ds := valid()
	ds.Status.NumberReady = 7
	Strategy{}.PrepareForCreate(context.Background(), ds)
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	switch {
	case ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType, ru.MaxUnavailable.String() != "1", ru.MaxSurge.String() != "0",
		*ds.Spec.RevisionHistoryLimit != 10:
		t.Errorf("defaults: %+v", ds.Spec)
	case ds.Status.NumberReady != 0 || ds.Generation != 1:
		t.Errorf("status not cleared or generation not 1: %+v %d", ds.Status, ds.Generation)
	case ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "1":
		t.Errorf("template generation annotation %v", ds.Annotations)
	case ds.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways:
		t.Errorf("pod template not defaulted: %+v", ds.Spec.Template.Spec)
	}

	onDelete := valid()
	onDelete.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	Strategy{}.PrepareForCreate(context.Background(), onDelete)
	if onDelete.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("OnDelete got rollingUpdate defaults: %+v", onDelete.Spec.UpdateStrategy)
	}
}

func TestValidate(t *testing.T) {
	zero, one, pct, over, bad := intstr.FromInt32(0), intstr.FromInt32(1), intstr.FromString("50%"), intstr.FromString("120%"), intstr.FromString("x%")
	rolling := func(unavailable, surge *intstr.IntOrString) func(*appsv1.DaemonSet) {
		return func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: unavailable, MaxSurge: surge}
		}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*appsv1.DaemonSet)
		wantErr string // "" means valid
	}{
		{name: "valid", mutate: func(*appsv1.DaemonSet) {}},
		{name: "surge instead of unavailable", mutate: rolling(&zero, &one)},
		{name: "percent unavailable", mutate: rolling(&pct, &zero)},
		{name: "OnDelete", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }},
		{name: "no selector matches nothing", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Selector = nil },
			wantErr: "spec.template.metadata.labels: Invalid value: {\"app\":\"agent\"}: `selector` does not match template `labels`"},
		{name: "empty selector", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} },
			wantErr: "spec.selector: Invalid value: {}: empty selector is invalid for daemonset"},
		{name: "selector must match template", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels = map[string]string{"app": "x"} },
			wantErr: "`selector` does not match template `labels`"},
		{name: "restartPolicy Always only", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			wantErr: "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""},
		{name: "no activeDeadlineSeconds", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To(int64(5)) },
			wantErr: "spec.template.spec.activeDeadlineSeconds: Invalid value: 5: activeDeadlineSeconds in DaemonSet is not Supported"},
		{name: "both zero", mutate: rolling(&zero, &zero), wantErr: "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"},
		{name: "both non-zero", mutate: rolling(&one, &one), wantErr: "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"},
		{name: "over 100%", mutate: rolling(&over, &zero), wantErr: "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%"},
		{name: "malformed percent", mutate: rolling(&bad, &zero), wantErr: "a valid percent string must be a numeric string followed by an ending '%'"},
		{name: "unknown strategy", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = "Recreate" },
			wantErr: "spec.updateStrategy: Unsupported value"},
		{name: "negative minReadySeconds", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = -1 },
			wantErr: "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"},
		{name: "negative revisionHistoryLimit", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr.To(int32(-1)) },
			wantErr: "spec.revisionHistoryLimit: Invalid value: -1"},
		{name: "container without image", mutate: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "" },
			wantErr: "spec.template.spec.containers[0].image: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := valid()
			tc.mutate(ds)
			Strategy{}.PrepareForCreate(context.Background(), ds)
			errs := Strategy{}.Validate(context.Background(), ds)
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
	old.Status.NumberReady = 3

	t.Run("a template change bumps template generation and generation, keeps status", func(t *testing.T) {
		ds := old.DeepCopy()
		ds.Status = appsv1.DaemonSetStatus{}
		ds.Spec.Template.Spec.Containers[0].Image = "busybox:1.36"
		delete(ds.Annotations, appsv1.DeprecatedTemplateGeneration)
		Strategy{}.PrepareForUpdate(context.Background(), ds, old)
		if ds.Generation != 2 || ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "2" || ds.Status.NumberReady != 3 {
			t.Errorf("generation %d annotations %v status %+v", ds.Generation, ds.Annotations, ds.Status)
		}
	})
	t.Run("another spec change bumps the generation only", func(t *testing.T) {
		ds := old.DeepCopy()
		ds.Spec.MinReadySeconds = 5
		Strategy{}.PrepareForUpdate(context.Background(), ds, old)
		if ds.Generation != 2 || ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "1" {
			t.Errorf("generation %d annotations %v", ds.Generation, ds.Annotations)
		}
	})
	t.Run("clients cannot set the template generation", func(t *testing.T) {
		ds := old.DeepCopy()
		ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "9"
		ds.Labels = map[string]string{"tier": "node"}
		Strategy{}.PrepareForUpdate(context.Background(), ds, old)
		if ds.Generation != 1 || ds.Annotations[appsv1.DeprecatedTemplateGeneration] != "1" {
			t.Errorf("generation %d annotations %v", ds.Generation, ds.Annotations)
		}
	})
	t.Run("the selector is immutable", func(t *testing.T) {
		ds := old.DeepCopy()
		ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent", "v": "2"}}
		ds.Spec.Template.Labels = map[string]string{"app": "agent", "v": "2"}
		if errs := (Strategy{}).ValidateUpdate(context.Background(), ds, old); !strings.Contains(errs.ToAggregate().Error(), "spec.selector: Invalid value") ||
			!strings.Contains(errs.ToAggregate().Error(), "field is immutable") {
			t.Errorf("got %v", errs)
		}
	})
	t.Run("a status write keeps the spec", func(t *testing.T) {
		ds := old.DeepCopy()
		ds.Spec.MinReadySeconds = 9
		ds.Status.DesiredNumberScheduled = 3
		StatusStrategy{}.PrepareForUpdate(context.Background(), ds, old)
		if ds.Spec.MinReadySeconds != 0 || ds.Status.DesiredNumberScheduled != 3 {
			t.Errorf("spec %+v status %+v", ds.Spec, ds.Status)
		}
	})
	t.Run("status counts are checked and collisionCount only grows", func(t *testing.T) {
		withCount := old.DeepCopy()
		withCount.Status.CollisionCount = ptr.To(int32(2))
		ds := withCount.DeepCopy()
		ds.Status.NumberUnavailable = -1
		ds.Status.CollisionCount = ptr.To(int32(1))
		msg := StatusStrategy{}.ValidateUpdate(context.Background(), ds, withCount).ToAggregate().Error()
		if !strings.Contains(msg, "status.numberUnavailable: Invalid value: -1") || !strings.Contains(msg, "status.collisionCount: Invalid value: 1: cannot be decremented") {
			t.Errorf("got %s", msg)
		}
	})
}

func TestTableRow(t *testing.T) {
	ds := valid()
	Strategy{}.PrepareForCreate(context.Background(), ds)
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2, UpdatedNumberScheduled: 3, NumberAvailable: 2}
	row := Strategy{}.TableRow(ds)
	if row[0] != "agent" || row[1] != int64(3) || row[2] != int64(3) || row[3] != int64(2) || row[4] != int64(3) || row[5] != int64(2) ||
		row[6] != "<none>" || row[8] != "c" || row[9] != "busybox" || row[10] != "app=agent" {
		t.Errorf("row %v", row)
	}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	if row := (Strategy{}).TableRow(ds); row[6] != "disk=ssd" {
		t.Errorf("node selector cell %v", row[6])
	}
	var names []string
	for _, c := range (Strategy{}).TableColumns() {
		if c.Priority == 0 {
			names = append(names, strings.ToUpper(c.Name))
		}
	}
	if got := strings.Join(names, " "); got != "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE" {
		t.Errorf("columns %q", got)
	}
	if len(row) != len(Strategy{}.TableColumns()) {
		t.Errorf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
	}
}
