package policy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/scheme"
)

// fakeLister holds objects; it has no watch cache, so readers List.
type fakeLister struct {
	objects []runtime.Object
	lists   int
}

func (f *fakeLister) VisitCached(string, *metainternalversion.ListOptions, func(runtime.Object) bool) (bool, error) {
	return false, nil
}

func (f *fakeLister) List(_ context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	f.lists++
	list := &metav1.List{}
	var items []runtime.Object
	for _, obj := range f.objects {
		m, _ := meta.Accessor(obj)
		if (namespace == "" || m.GetNamespace() == namespace) && (opts.LabelSelector == nil || opts.LabelSelector.Matches(labels.Set(m.GetLabels()))) {
			items = append(items, obj)
		}
	}
	return list, meta.SetList(list, items)
}

func (f *fakeLister) Get(_ context.Context, namespace, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	for _, obj := range f.objects {
		if m, _ := meta.Accessor(obj); m.GetNamespace() == namespace && m.GetName() == name {
			return obj, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, name)
}

func policy(name string, paramKind *admissionregistrationv1.ParamKind, expression string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:     paramKind,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expression}},
		},
	}
}

func binding(name, policyName string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
}

func TestHooks(t *testing.T) {
	bindings := &fakeLister{objects: []runtime.Object{
		binding("b2", "a"), binding("b1", "a"), binding("b3", "missing"), binding("b4", "c"), binding("b5", "bad"),
	}}
	policies := &fakeLister{objects: []runtime.Object{
		policy("c", &admissionregistrationv1.ParamKind{APIVersion: "x.example.com/v1", Kind: "Nope"}, "true"),
		policy("bad", &admissionregistrationv1.ParamKind{APIVersion: "a/b/c", Kind: "Nope"}, "true"),
		policy("a", nil, "true"),
		policy("unbound", nil, "true"),
	}}
	p := New(Config{Policies: policies, Bindings: bindings, Resources: func() []Resource { return nil }})
	hooks, err := p.hooks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// a with its bindings in name order; c with kube's configuration error; the binding
	// to a missing policy, the policy whose paramKind does not parse and the unbound
	// policy left out.
	if len(hooks) != 2 || hooks[0].Policy.Name != "a" || hooks[1].Policy.Name != "c" {
		t.Fatalf("hooks %+v", hooks)
	}
	if b := hooks[0].Bindings; len(b) != 2 || b[0].Name != "b1" || b[1].Name != "b2" || hooks[0].ConfigurationError != nil {
		t.Errorf("hook a: bindings %v, error %v", b, hooks[0].ConfigurationError)
	}
	if err := hooks[1].ConfigurationError; err == nil || err.Error() != "failed to find resource referenced by paramKind: 'x.example.com/v1, Kind=Nope'" {
		t.Errorf("hook c: error %v", err)
	}
	// The evaluator is compiled once per resourceVersion.
	again, _ := p.hooks(context.Background())
	if again[0].Evaluator != hooks[0].Evaluator {
		t.Error("a's evaluator compiled again for the same resourceVersion")
	}
	policies.objects[2].(*admissionregistrationv1.ValidatingAdmissionPolicy).ResourceVersion = "2"
	if again, _ = p.hooks(context.Background()); again[0].Evaluator == hooks[0].Evaluator {
		t.Error("a's evaluator not compiled again for a new resourceVersion")
	}
}

func TestAdmit(t *testing.T) {
	policies := &fakeLister{objects: []runtime.Object{policy("deny-all", nil, "false")}}
	bindings := &fakeLister{objects: []runtime.Object{binding("deny-all", "deny-all")}}
	p := New(Config{Policies: policies, Bindings: bindings, Namespaces: &fakeLister{}, Scheme: scheme.Scheme})
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	err := p.Admit(ctx, admission.Attributes{Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("nodes"),
		Kind: corev1.SchemeGroupVersion.WithKind("Node"), Name: "n1", Object: node, UserInfo: &user.DefaultInfo{Name: "u"}})
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity ||
		status.Status().Message != `nodes "n1" is forbidden: ValidatingAdmissionPolicy 'deny-all' with binding 'deny-all' denied request: failed expression: false` {
		t.Fatalf("node create: %v", err)
	}
	// The policies themselves are never matched, so a policy cannot lock itself in.
	err = p.Admit(ctx, admission.Attributes{Operation: admission.Delete, Resource: admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"),
		Kind: admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"), Name: "deny-all", OldObject: policies.objects[0]})
	if err != nil {
		t.Fatalf("deleting the policy: %v", err)
	}
}

// TestRuntimeCostBudget: an expression that would run ten million steps is cut off at
// kube's runtime cost budget, a failure under failurePolicy Fail, skipped under Ignore.
func TestRuntimeCostBudget(t *testing.T) {
	expr := "true"
	for _, v := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		expr = "[1,2,3,4,5,6,7,8,9,10].all(" + v + ", " + expr + ")"
	}
	costly := policy("costly", nil, expr)
	policies := &fakeLister{objects: []runtime.Object{costly}}
	p := New(Config{Policies: policies, Bindings: &fakeLister{objects: []runtime.Object{binding("costly", "costly")}},
		Namespaces: &fakeLister{}, Scheme: scheme.Scheme})
	attrs := admission.Attributes{Operation: admission.Create, Resource: corev1.SchemeGroupVersion.WithResource("nodes"),
		Kind: corev1.SchemeGroupVersion.WithKind("Node"), Name: "n1", Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	err := p.Admit(context.Background(), attrs)
	if !apierrors.IsInvalid(err) || !strings.HasSuffix(err.Error(), "resulted in error: operation cancelled: actual cost limit exceeded") {
		t.Fatalf("Fail: %v", err)
	}
	costly.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	costly.ResourceVersion = "2"
	if err := p.Admit(context.Background(), attrs); err != nil {
		t.Fatalf("Ignore: %v", err)
	}
}
