package podtemplate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func valid() *corev1.PodTemplate {
	return &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "tmpl", Namespace: "default"},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}, {Name: "d", Image: "nginx"}}},
		},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*corev1.PodTemplate)
		wantErr string // "" means valid
	}{
		{name: "valid", mutate: func(*corev1.PodTemplate) {}},
		{name: "any restartPolicy", mutate: func(p *corev1.PodTemplate) { p.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }},
		{name: "a template is required", mutate: func(p *corev1.PodTemplate) { p.Template = corev1.PodTemplateSpec{} },
			wantErr: "template.spec.containers: Required value"},
		{name: "a valid container", mutate: func(p *corev1.PodTemplate) { p.Template.Spec.Containers[0].Name = "C" },
			wantErr: "template.spec.containers[0].name: Invalid value: \"C\""},
		{name: "a name is required", mutate: func(p *corev1.PodTemplate) { p.Name = "" },
			wantErr: "metadata.name: Required value"},
		{name: "valid template labels", mutate: func(p *corev1.PodTemplate) { p.Template.Labels = map[string]string{"a b": "c"} },
			wantErr: "template.metadata.labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := valid()
			tc.mutate(p)
			Strategy{}.PrepareForCreate(context.Background(), p)
			errs := Strategy{}.Validate(context.Background(), p)
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

func TestGenerationFollowsTheTemplate(t *testing.T) {
	old := valid()
	Strategy{}.PrepareForCreate(context.Background(), old)
	old.ResourceVersion = "1"
	if old.Generation != 1 || old.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Fatalf("generation %d restartPolicy %q after create", old.Generation, old.Template.Spec.RestartPolicy)
	}
	labelled := old.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	Strategy{}.PrepareForUpdate(context.Background(), labelled, old)
	if labelled.Generation != 1 {
		t.Errorf("a label change: generation %d, want 1", labelled.Generation)
	}
	changed := old.DeepCopy()
	changed.Template.Spec.Containers[0].Image = "busybox:1.37"
	Strategy{}.PrepareForUpdate(context.Background(), changed, old)
	if changed.Generation != 2 {
		t.Errorf("a template change: generation %d, want 2", changed.Generation)
	}
	changed.Template.Spec.Containers = nil
	if errs := (Strategy{}).ValidateUpdate(context.Background(), changed, old); !strings.Contains(errs.ToAggregate().Error(), "template.spec.containers: Required value") {
		t.Errorf("an update to an invalid template: %v", errs)
	}
}

func TestTableRow(t *testing.T) {
	row := Strategy{}.TableRow(valid())
	if row[0] != "tmpl" || row[1] != "c,d" || row[2] != "busybox:1.36,nginx" || row[3] != "app=web" {
		t.Errorf("row %v", row)
	}
	var names []string
	for _, c := range (Strategy{}).TableColumns() {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "Name Containers Images Pod Labels" || len(row) != len(names) {
		t.Errorf("columns %s for %d cells", got, len(row))
	}
}
