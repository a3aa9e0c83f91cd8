package poddisruptionbudget

import (
	"context"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func pdb(min, max *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "1", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: min, MaxUnavailable: max,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}

// TestValidatePodDisruptionBudgetSpec pins kube's rules: each field path and error type.
func TestValidatePodDisruptionBudgetSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *policyv1.PodDisruptionBudget
		want []string // "type path"
	}{
		{"integer", pdb(ptr.To(intstr.FromInt32(2)), nil), nil},
		{"percent", pdb(nil, ptr.To(intstr.FromString("100%"))), nil},
		{"zero", pdb(ptr.To(intstr.FromInt32(0)), nil), nil},
		{"neither", pdb(nil, nil), nil},
		{"both", pdb(ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(1))), []string{"FieldValueInvalid spec"}},
		{"negative", pdb(nil, ptr.To(intstr.FromInt32(-2))), []string{"FieldValueInvalid spec.maxUnavailable"}},
		{"101%", pdb(ptr.To(intstr.FromString("101%")), nil), []string{"FieldValueInvalid spec.minAvailable"}},
		{"not a percent", pdb(ptr.To(intstr.FromString("1.5%")), nil), []string{"FieldValueInvalid spec.minAvailable"}},
	} {
		errs := ValidatePodDisruptionBudgetSpec(&tc.spec.Spec, false, field.NewPath("spec"))
		var got []string
		for _, e := range errs {
			got = append(got, string(e.Type)+" "+e.Field)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	p := pdb(nil, nil)
	p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.UnhealthyPodEvictionPolicyType("Never"))
	if errs := ValidatePodDisruptionBudgetSpec(&p.Spec, false, field.NewPath("spec")); len(errs) != 1 ||
		errs[0].Type != field.ErrorTypeNotSupported || errs[0].Field != "spec.unhealthyPodEvictionPolicy" {
		t.Errorf("unhealthyPodEvictionPolicy Never: %v", errs)
	}
	p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
	p.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a b"}}}
	if errs := ValidatePodDisruptionBudgetSpec(&p.Spec, false, field.NewPath("spec")); len(errs) != 1 {
		t.Errorf("invalid label value: %v", errs)
	}
	if errs := ValidatePodDisruptionBudgetSpec(&p.Spec, hasInvalidLabelValueInSelector(p.Spec.Selector), field.NewPath("spec")); len(errs) != 0 {
		t.Errorf("invalid label value already stored: %v", errs)
	}
}

// TestStrategies covers what create, update and status updates keep and change.
func TestStrategies(t *testing.T) {
	ctx := context.Background()
	p := pdb(ptr.To(intstr.FromInt32(1)), nil)
	p.Status.DisruptionsAllowed = 4
	Strategy{}.PrepareForCreate(ctx, p)
	if p.Status.DisruptionsAllowed != 0 || p.Generation != 1 {
		t.Errorf("create: %+v generation %d", p.Status, p.Generation)
	}
	old := p.DeepCopy()
	old.Status.DisruptionsAllowed = 3
	upd := p.DeepCopy()
	upd.Labels = map[string]string{"a": "b"}
	Strategy{}.PrepareForUpdate(ctx, upd, old)
	if upd.Generation != 1 || upd.Status.DisruptionsAllowed != 3 {
		t.Errorf("metadata update: generation %d status %+v", upd.Generation, upd.Status)
	}
	upd.Spec.MinAvailable = ptr.To(intstr.FromString("50%"))
	Strategy{}.PrepareForUpdate(ctx, upd, old)
	if upd.Generation != 2 {
		t.Errorf("spec update: generation %d, want 2", upd.Generation)
	}
	st := old.DeepCopy()
	st.Spec.MinAvailable = ptr.To(intstr.FromInt32(9))
	st.Status.ExpectedPods = -1
	StatusStrategy{}.PrepareForUpdate(ctx, st, old)
	if st.Spec.MinAvailable.IntVal != 1 {
		t.Errorf("status update changed the spec: %+v", st.Spec)
	}
	if errs := (StatusStrategy{}).ValidateUpdate(ctx, st, old); len(errs) != 1 || errs[0].Field != "status.expectedPods" {
		t.Errorf("negative expectedPods: %v", errs)
	}
	row := Strategy{}.TableRow(old)
	if row[1] != "1" || row[2] != "N/A" || row[3] != int64(3) {
		t.Errorf("row %v", row)
	}
}
