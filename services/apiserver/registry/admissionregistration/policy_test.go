package admissionregistration_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicy"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicybinding"
)

// validPolicy is a defaulted policy over apps/v1 deployments.
func validPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas.example.com"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		},
	}
	validatingadmissionpolicy.Strategy{}.PrepareForCreate(context.Background(), p)
	return p
}

func validBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas-binding"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "replicas.example.com",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	validatingadmissionpolicybinding.Strategy{}.PrepareForCreate(context.Background(), b)
	return b
}

func TestPolicyDefaults(t *testing.T) {
	p := validPolicy()
	p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{}}
	p.Status.ObservedGeneration = 7
	validatingadmissionpolicy.Strategy{}.PrepareForCreate(context.Background(), p)
	m := p.Spec.MatchConstraints
	switch {
	case p.Generation != 1 || p.Status.ObservedGeneration != 0:
		t.Errorf("generation %d, status %+v: want 1 and a cleared status", p.Generation, p.Status)
	case p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail:
		t.Errorf("failurePolicy = %v, want Fail", p.Spec.FailurePolicy)
	case m.MatchPolicy == nil || *m.MatchPolicy != admissionregistrationv1.Equivalent:
		t.Errorf("matchPolicy = %v, want Equivalent", m.MatchPolicy)
	case m.NamespaceSelector == nil || m.ObjectSelector == nil:
		t.Errorf("selectors = %v, %v, want {}", m.NamespaceSelector, m.ObjectSelector)
	case m.ResourceRules[0].Scope == nil || *m.ResourceRules[0].Scope != admissionregistrationv1.AllScopes ||
		m.ExcludeResourceRules[0].Scope == nil || *m.ExcludeResourceRules[0].Scope != admissionregistrationv1.AllScopes:
		t.Errorf("rule scopes = %v, %v, want *", m.ResourceRules[0].Scope, m.ExcludeResourceRules[0].Scope)
	}

	b := validBinding()
	if b.Spec.MatchResources != nil {
		t.Errorf("a binding without matchResources got %+v", b.Spec.MatchResources)
	}
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{}
	validatingadmissionpolicybinding.Strategy{}.PrepareForCreate(context.Background(), b)
	if mr := b.Spec.MatchResources; mr.MatchPolicy == nil || *mr.MatchPolicy != admissionregistrationv1.Equivalent || mr.NamespaceSelector == nil || mr.ObjectSelector == nil {
		t.Errorf("binding matchResources = %+v, want the defaults", mr)
	}
}

// oneError checks that errs is one error whose string holds want, or none for "".
func oneError(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	switch {
	case want == "" && len(errs) != 0:
		t.Errorf("want valid, got %v", errs)
	case want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), want)):
		t.Errorf("want one error with %q, got %v", want, errs)
	}
}

func TestValidateValidatingAdmissionPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*admissionregistrationv1.ValidatingAdmissionPolicy)
		want   string
	}{
		{"valid", func(*admissionregistrationv1.ValidatingAdmissionPolicy) {}, ""},
		{"a name that is not a DNS subdomain", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Name = "Bad_Name" }, "metadata.name: Invalid value"},
		{"failurePolicy", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Maybe"))
		},
			`spec.failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"`},
		{"matchConstraints are required", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.MatchConstraints = nil },
			"spec.matchConstraints: Required value"},
		{"with resourceRules", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules = nil
		},
			"spec.matchConstraints.resourceRules: Required value"},
		{"a rule without operations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = nil
		}, "spec.matchConstraints.resourceRules[0].operations: Required value"},
		{"resourceNames", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"a", "a"}
		}, "spec.matchConstraints.resourceRules[0].resourceNames[1]: Duplicate value"},
		{"an expression that does not compile", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "object.spec.replicas >"
		}, "spec.validations[0].expression: Invalid value: \"object.spec.replicas >\": compilation failed"},
		{"an expression that is not a bool", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "'yes'"
		}, "spec.validations[0].expression: Invalid value: \"'yes'\": must evaluate to bool"},
		{"params without a paramKind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "object.spec.replicas <= params.max"
		}, "undeclared reference to 'params'"},
		{"params with a paramKind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
			p.Spec.Validations[0].Expression = "object.spec.replicas <= int(params.data.max)"
			p.Spec.Validations[0].MessageExpression = "'at most ' + params.data.max"
		}, ""},
		{"a paramKind without a version", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/", Kind: "Limits"}
		}, "spec.paramKind.apiVersion: Invalid value: \"example.com/\": version must be specified"},
		{"a paramKind without a kind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1"}
		}, "spec.paramKind.kind: Required value"},
		{"a messageExpression that is not a string", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].MessageExpression = "object.spec.replicas"
		}, "spec.validations[0].messageExpression: Invalid value: \"object.spec.replicas\": must evaluate to string"},
		{"a message over two lines", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Message = "too\nmany"
		}, "spec.validations[0].message: Invalid value: \"too\\nmany\": message must not contain line breaks"},
		{"a reason", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Reason = ptr.To(metav1.StatusReasonConflict)
		}, `spec.validations[0].reason: Unsupported value: "Conflict": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge"`},
		{"validations or auditAnnotations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.Validations = nil }, "REQUIRED TWICE"},
		{"variables", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "replicas", Expression: "object.spec.replicas"}, {Name: "odd", Expression: "variables.replicas % 2 == 1"}}
			p.Spec.Validations[0].Expression = "variables.odd && variables.replicas < 5"
		}, ""},
		{"a variable not a CEL identifier", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "in", Expression: "1"}}
		}, "spec.variables[0].name: Invalid value: \"in\": name is not a valid CEL identifier"},
		{"a variable used before it is declared", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "a", Expression: "variables.b"}, {Name: "b", Expression: "1"}}
		}, "spec.variables[0].expression: Invalid value"},
		{"matchConditions", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "request.userInfo.username"}}
		}, "spec.matchConditions[0].expression: Invalid value"},
		{"auditAnnotations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "replicas", ValueExpression: "string(object.spec.replicas)"}}
		}, ""},
		{"an auditAnnotation key", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "a b", ValueExpression: "'x'"}}
		}, "spec.auditAnnotations[0].key: Invalid value: \"replicas.example.com/a b\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPolicy()
			tc.change(p)
			errs := validatingadmissionpolicy.Strategy{}.Validate(context.Background(), p)
			if tc.want == "REQUIRED TWICE" {
				if len(errs) != 2 || errs[0].Field != "spec.validations" || errs[1].Field != "spec.auditAnnotations" {
					t.Errorf("errors %v, want spec.validations and spec.auditAnnotations required", errs)
				}
				return
			}
			oneError(t, errs, tc.want)
		})
	}
}

func TestValidatingAdmissionPolicyUpdate(t *testing.T) {
	old := validPolicy()
	old.ResourceVersion = "5"
	old.Status.ObservedGeneration = 1
	p := old.DeepCopy()
	p.Spec.Validations[0].Expression = "object.spec.replicas <= 6"
	p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	s := validatingadmissionpolicy.Strategy{}
	s.PrepareForUpdate(context.Background(), p, old)
	if p.Generation != 2 || p.Status.ObservedGeneration != 1 {
		t.Errorf("generation %d, observedGeneration %d: want 2 and the stored status", p.Generation, p.Status.ObservedGeneration)
	}
	oneError(t, s.ValidateUpdate(context.Background(), p, old), "")

	// The status subresource writes the status only.
	st := old.DeepCopy()
	st.Spec.Validations = nil
	st.Labels = map[string]string{"a": "b"}
	st.Status.TypeChecking = &admissionregistrationv1.TypeChecking{ExpressionWarnings: []admissionregistrationv1.ExpressionWarning{{FieldRef: "spec.validations[0].expression", Warning: "w"}}}
	validatingadmissionpolicy.StatusStrategy{}.PrepareForUpdate(context.Background(), st, old)
	if len(st.Spec.Validations) != 1 || st.Labels != nil || st.Status.TypeChecking == nil {
		t.Errorf("status update kept spec %v, labels %v, status %v", st.Spec.Validations, st.Labels, st.Status)
	}
	oneError(t, validatingadmissionpolicy.StatusStrategy{}.ValidateUpdate(context.Background(), st, old), "")
	st.Status.TypeChecking.ExpressionWarnings[0].FieldRef = "spec.validations[0"
	oneError(t, validatingadmissionpolicy.StatusStrategy{}.ValidateUpdate(context.Background(), st, old),
		"status.typeChecking.expressionWarnings[0].fieldRef: Invalid value")
}

func TestValidateValidatingAdmissionPolicyBinding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		want   string
	}{
		{"valid", func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {}, ""},
		{"policyName is required", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { b.Spec.PolicyName = "" },
			"spec.policyName: Required value"},
		{"an action", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{"Explode"}
		}, `spec.validationActions[0]: Unsupported value: "Explode": supported values: "Audit", "Deny", "Warn"`},
		{"an action twice", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{"Audit", "Audit"}
		}, `spec.validationActions[1]: Duplicate value: "Audit"`},
		{"Deny and Warn", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{"Deny", "Warn"}
		}, "must not contain both Deny and Warn"},
		{"no action", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { b.Spec.ValidationActions = nil },
			"spec.validationActions: Required value: at least one validation action is required"},
		{"a paramRef by name", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
		}, ""},
		{"a paramRef with name and selector", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
		}, "DOUBLE"},
		{"a paramRef naming nothing", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)}
		}, "spec.paramRef: Required value: one of name or selector must be specified"},
		{"parameterNotFoundAction is required", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits"}
		}, "spec.paramRef.parameterNotFoundAction: Required value"},
		{"matchResources", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{MatchPolicy: ptr.To(admissionregistrationv1.Exact),
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b c"}}, ObjectSelector: &metav1.LabelSelector{}}
		}, "spec.matchResources.namespaceSelector.matchLabels: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := validBinding()
			tc.change(b)
			errs := validatingadmissionpolicybinding.Strategy{}.Validate(context.Background(), b)
			if tc.want == "DOUBLE" {
				if len(errs) != 2 || errs[0].Field != "spec.paramRef.name" || errs[1].Field != "spec.paramRef.selector" {
					t.Errorf("errors %v, want name and selector forbidden", errs)
				}
				return
			}
			oneError(t, errs, tc.want)
		})
	}
}

// denyAll refuses everything, recording what it was asked.
type denyAll struct{ asked []authorizer.Attributes }

func (d *denyAll) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d.asked = append(d.asked, a)
	return authorizer.DecisionNoOpinion, "", nil
}

func TestParamAuthorization(t *testing.T) {
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	masters := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "root", Groups: []string{user.SystemPrivilegedGroup}})
	authz := &denyAll{}
	s := validatingadmissionpolicy.Strategy{Authorizer: authz}
	p := validPolicy()
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	oneError(t, s.Validate(ctx, p), `spec.paramKind: Forbidden: user &{alice  [] map[]} must have "get" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)`)
	if a := authz.asked[0]; a.GetVerb() != "get" || a.GetAPIGroup() != "" || a.GetAPIVersion() != "v1" || a.GetResource() != "*" || a.GetNamespace() != "*" {
		t.Errorf("asked %+v", a)
	}
	oneError(t, s.Validate(masters, p), "")

	bs := validatingadmissionpolicybinding.Strategy{Authorizer: authz}
	b := validBinding()
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	oneError(t, bs.Validate(ctx, b), `spec.paramRef: Forbidden: unable to get policy replicas.example.com to determine minimum required permissions and user &{alice  [] map[]} does not have "list" permission`)
	oneError(t, bs.Validate(masters, b), "")
}
