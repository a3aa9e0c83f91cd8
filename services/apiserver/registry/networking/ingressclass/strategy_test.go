package ingressclass

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func valid() *networkingv1.IngressClass {
	return &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "ingressclass1", ResourceVersion: "1"},
		Spec: networkingv1.IngressClassSpec{
			Controller: "example.com/controller",
			Parameters: &networkingv1.IngressClassParametersReference{
				APIGroup: ptr.To("k8s.example.com"), Kind: "IngressParameters", Name: "external-lb",
				Scope: ptr.To(networkingv1.IngressClassParametersReferenceScopeNamespace), Namespace: ptr.To("default"),
			},
		},
	}
}

func TestValidateIngressClass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*networkingv1.IngressClass)
		want   string // a substring of the one error expected; "" means valid
	}{
		{"namespaced parameters", func(*networkingv1.IngressClass) {}, ""},
		{"the conformance suite's class", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters = nil }, ""},
		{"cluster parameters", func(ic *networkingv1.IngressClass) {
			ic.Spec.Parameters.Scope, ic.Spec.Parameters.Namespace = ptr.To(networkingv1.IngressClassParametersReferenceScopeCluster), nil
		}, ""},
		{"the controller is required", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "" }, "spec.controller: Required value"},
		{"the controller is domain-prefixed", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "controller" },
			`spec.controller: Invalid value: "controller": must be a domain-prefixed path`},
		{"the controller has at most 250 characters", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "example.com/" + strings.Repeat("a", 239) },
			"spec.controller: Too long"},
		{"parameters have a kind", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Kind = "" }, "spec.parameters.kind: Required value: kind is required"},
		{"parameters have a name", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Name = "" }, "spec.parameters.name: Required value: name is required"},
		{"parameters' apiGroup is a DNS subdomain", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.APIGroup = ptr.To("Bad_Group") },
			`spec.parameters.apiGroup: Invalid value: "Bad_Group"`},
		{"parameters have a scope", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Scope = nil }, "spec.parameters.scope: Required value"},
		{"the scope is Cluster or Namespace", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Scope = ptr.To("World") },
			`spec.parameters.scope: Unsupported value: "World": supported values: "Cluster", "Namespace"`},
		{"Namespace scope needs a namespace", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Namespace = nil },
			"spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"},
		{"the namespace is a DNS label", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Namespace = ptr.To("a.b") },
			`spec.parameters.namespace: Invalid value: "a.b"`},
		{"Cluster scope has no namespace", func(ic *networkingv1.IngressClass) {
			ic.Spec.Parameters.Scope = ptr.To(networkingv1.IngressClassParametersReferenceScopeCluster)
		}, "spec.parameters.namespace: Forbidden: `parameters.scope` is set to 'Cluster'"},
		{"the name is a DNS subdomain", func(ic *networkingv1.IngressClass) { ic.Name = "Not_A_Name" }, `metadata.name: Invalid value: "Not_A_Name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ic := valid()
			tc.change(ic)
			errs := Strategy{}.Validate(context.Background(), ic)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("want one error containing %q, got %v", tc.want, errs)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	ctx := context.Background()
	old := valid()
	old.Generation = 1
	upd := old.DeepCopy()
	upd.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
	upd.Spec.Parameters.Name = "other"
	Strategy{}.PrepareForUpdate(ctx, upd, old)
	if errs := (Strategy{}).ValidateUpdate(ctx, upd, old); len(errs) != 0 {
		t.Errorf("a parameters change: %v", errs)
	}
	if upd.Generation != 2 {
		t.Errorf("generation %d, want 2", upd.Generation)
	}
	upd.Spec.Controller = "example.com/other"
	if errs := (Strategy{}).ValidateUpdate(ctx, upd, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.controller: Invalid value: \"example.com/other\": field is immutable") {
		t.Errorf("a controller change: got %v", errs)
	}
}

func TestDefaultsAndTableRow(t *testing.T) {
	ic := valid()
	ic.Spec.Parameters.Scope, ic.Spec.Parameters.Namespace = nil, nil
	Strategy{}.PrepareForCreate(context.Background(), ic)
	if ic.Generation != 1 || ptr.Deref(ic.Spec.Parameters.Scope, "") != networkingv1.IngressClassParametersReferenceScopeCluster {
		t.Errorf("create: generation %d scope %v", ic.Generation, ic.Spec.Parameters.Scope)
	}
	if errs := (Strategy{}).Validate(context.Background(), ic); len(errs) != 0 {
		t.Errorf("defaulted: %v", errs)
	}
	row := Strategy{}.TableRow(ic)
	if len(row) != len(Strategy{}.TableColumns()) || row[1] != "example.com/controller" || row[2] != "IngressParameters.k8s.example.com/external-lb" {
		t.Errorf("row %v", row)
	}
	ic.Spec.Parameters = nil
	if row := (Strategy{}).TableRow(ic); row[2] != "<none>" {
		t.Errorf("row %v", row)
	}
}
