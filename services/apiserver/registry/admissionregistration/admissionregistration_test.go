package admissionregistration_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry/admissionregistration/mutatingwebhookconfiguration"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingwebhookconfiguration"
)

func validMutating() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "config"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "label.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://webhook.example.com/mutate")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("pods")},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func rule(resources ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
	}
}

func TestDefaults(t *testing.T) {
	c := validMutating()
	c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc"}}
	mutatingwebhookconfiguration.Strategy{}.PrepareForCreate(context.Background(), c)
	h := c.Webhooks[0]
	switch {
	case c.Generation != 1:
		t.Errorf("generation = %d, want 1", c.Generation)
	case h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail:
		t.Errorf("failurePolicy = %v, want Fail", h.FailurePolicy)
	case h.MatchPolicy == nil || *h.MatchPolicy != admissionregistrationv1.Equivalent:
		t.Errorf("matchPolicy = %v, want Equivalent", h.MatchPolicy)
	case h.TimeoutSeconds == nil || *h.TimeoutSeconds != 10:
		t.Errorf("timeoutSeconds = %v, want 10", h.TimeoutSeconds)
	case h.NamespaceSelector == nil || h.ObjectSelector == nil:
		t.Errorf("selectors = %v, %v, want {}", h.NamespaceSelector, h.ObjectSelector)
	case h.ReinvocationPolicy == nil || *h.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy:
		t.Errorf("reinvocationPolicy = %v, want Never", h.ReinvocationPolicy)
	case h.Rules[0].Scope == nil || *h.Rules[0].Scope != admissionregistrationv1.AllScopes:
		t.Errorf("rule scope = %v, want *", h.Rules[0].Scope)
	case h.ClientConfig.Service.Port == nil || *h.ClientConfig.Service.Port != 443:
		t.Errorf("service port = %v, want 443", h.ClientConfig.Service.Port)
	case h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone:
		t.Errorf("sideEffects = %v, want the None it had", h.SideEffects)
	}
}

func TestValidateMutatingWebhookConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*admissionregistrationv1.MutatingWebhookConfiguration)
		want   string // a substring of the one error expected; "" means valid
	}{
		{"valid", func(*admissionregistrationv1.MutatingWebhookConfiguration) {}, ""},
		{"a service", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "ns", Name: "svc", Path: ptr.To("/mutate/pods")}}
		}, ""},
		{"v1beta1 reviews are accepted", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].AdmissionReviewVersions = []string{"v2", "v1beta1"}
		}, ""},
		{"subresource forms", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{rule("pods", "pods/*", "*/status")}
		}, ""},
		{"the configuration name is a DNS subdomain", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Name = "Bad_Name" },
			`metadata.name: Invalid value: "Bad_Name"`},
		{"the webhook name has three segments", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].Name = "example.com" },
			`webhooks[0].name: Invalid value: "example.com": should be a domain with at least three segments separated by dots`},
		{"webhook names are unique", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks = append(c.Webhooks, c.Webhooks[0])
		}, `webhooks[1].name: Duplicate value: "label.example.com"`},
		{"admissionReviewVersions are required", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].AdmissionReviewVersions = nil
		},
			"webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"},
		{"admissionReviewVersions include v1 or v1beta1", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].AdmissionReviewVersions = []string{"v2"}
		}, `webhooks[0].admissionReviewVersions: Invalid value: ["v2"]: must include at least one of v1, v1beta1`},
		{"sideEffects are required", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].SideEffects = nil },
			"webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"},
		{"sideEffects None or NoneOnDryRun", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		}, `webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"`},
		{"exactly one of url and service", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.Service = &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc"}
		}, "webhooks[0].clientConfig: Required value: exactly one of url or service is required"},
		{"the url is https", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.URL = ptr.To("http://webhook.example.com/")
		}, `webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`},
		{"the url has no user", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://me@webhook.example.com/")
		}, "webhooks[0].clientConfig.url: Invalid value: \"me\": user information is not permitted in the URL"},
		{"the url has no query", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://webhook.example.com/?a=b")
		}, "query parameters are not permitted in the URL"},
		{"the url has no fragment", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://webhook.example.com/#x")
		}, "fragments are not permitted in the URL"},
		{"the service port is a port", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "ns", Name: "svc", Port: ptr.To[int32](70000)}}
		}, "webhooks[0].clientConfig.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive"},
		{"the service has a namespace", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "svc"}}
		}, "webhooks[0].clientConfig.service.namespace: Required value"},
		{"the service path starts with /", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "ns", Name: "svc", Path: ptr.To("mutate")}}
		}, `webhooks[0].clientConfig.service.path: Invalid value: "mutate": must start with a '/'`},
		{"operations are required", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].Rules[0].Operations = nil },
			"webhooks[0].rules[0].operations: Required value"},
		{"operations are known", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Operations = []admissionregistrationv1.OperationType{"PATCH"}
		}, `webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"`},
		{"apiGroups are required", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].Rules[0].APIGroups = nil },
			"webhooks[0].rules[0].apiGroups: Required value"},
		{"apiVersions are not empty", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].APIVersions = []string{""}
		},
			"webhooks[0].rules[0].apiVersions[0]: Required value"},
		{"a wildcard group stands alone", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].APIGroups = []string{"*", "apps"}
		},
			"if '*' is present, must not specify other API groups"},
		{"resources are required", func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].Rules[0].Resources = nil },
			"webhooks[0].rules[0].resources: Required value"},
		{"'*' covers every resource", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Resources = []string{"*", "pods"}
		}, "if '*' is present, must not specify other resources without subresources"},
		{"'pods/*' covers pods/status", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Resources = []string{"pods/*", "pods/status"}
		}, "webhooks[0].rules[0].resources[1]: Invalid value: \"pods/status\": if 'pods/*' is present, must not specify pods/status"},
		{"the scope is known", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Scope = ptr.To(admissionregistrationv1.ScopeType("Galaxy"))
		}, `webhooks[0].rules[0].scope: Unsupported value: "Galaxy"`},
		{"timeoutSeconds at most 30", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].TimeoutSeconds = ptr.To[int32](31)
		},
			"webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"},
		{"timeoutSeconds at least 1", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].TimeoutSeconds = ptr.To[int32](0)
		},
			"webhooks[0].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds"},
		{"failurePolicy is Fail or Ignore", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Maybe"))
		}, `webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"`},
		{"reinvocationPolicy is Never or IfNeeded", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ReinvocationPolicy = ptr.To(admissionregistrationv1.ReinvocationPolicyType("Always"))
		}, `webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"`},
		{"selectors are valid", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, `webhooks[0].objectSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`},
		{"a match condition compiles", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "broken", Expression: "object.metadata.name =="}}
		}, "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata.name ==\": compilation failed: ERROR: <input>:1:24: Syntax error"},
		{"a match condition is a bool", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "name", Expression: "object.metadata.name"}}
		}, "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata.name\": must evaluate to bool"},
		{"match condition names are unique", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "a", Expression: "true"}, {Name: "a", Expression: "false"}}
		}, `webhooks[0].matchConditions[1].name: Duplicate value: "a"`},
		{"match condition names are qualified names", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not a name", Expression: "true"}}
		}, `webhooks[0].matchConditions[0].name: Invalid value: "not a name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validMutating()
			tc.change(c)
			mutatingwebhookconfiguration.Strategy{}.PrepareForCreate(context.Background(), c)
			errs := mutatingwebhookconfiguration.Strategy{}.Validate(context.Background(), c)
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

func TestUpdateBumpsGenerationAndKeepsWhatWasAlreadyStored(t *testing.T) {
	ctx := context.Background()
	s := validatingwebhookconfiguration.Strategy{}
	old := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "config", ResourceVersion: "5"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "deny.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://webhook.example.com/")},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	s.PrepareForCreate(ctx, old)
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	s.PrepareForUpdate(ctx, relabelled, old)
	if relabelled.Generation != 1 {
		t.Errorf("a label change moved the generation to %d", relabelled.Generation)
	}
	changed := old.DeepCopy()
	changed.Webhooks[0].TimeoutSeconds = ptr.To[int32](5)
	s.PrepareForUpdate(ctx, changed, old)
	if changed.Generation != 2 {
		t.Errorf("a webhook change left the generation at %d, want 2", changed.Generation)
	}
	if errs := s.ValidateUpdate(ctx, changed, old); len(errs) != 0 {
		t.Errorf("valid update refused: %v", errs)
	}
	// A configuration stored with sideEffects Some (as v1beta1 allowed) may still be
	// updated; a stored None may not become Some.
	some := old.DeepCopy()
	some.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
	if errs := s.ValidateUpdate(ctx, some, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), `Unsupported value: "Some"`) {
		t.Errorf("None -> Some: want one Unsupported value error, got %v", errs)
	}
	relabelledSome := some.DeepCopy()
	relabelledSome.Labels = map[string]string{"a": "b"}
	if errs := s.ValidateUpdate(ctx, relabelledSome, some); len(errs) != 0 {
		t.Errorf("update of a stored Some refused: %v", errs)
	}
	if s.AllowUnconditionalUpdate() {
		t.Error("updates without a resourceVersion are allowed; kube refuses them")
	}
}

func TestTableRow(t *testing.T) {
	c := validMutating()
	row := mutatingwebhookconfiguration.Strategy{}.TableRow(c)
	if row[0] != "config" || row[1] != int64(1) {
		t.Fatalf("row = %v, want config and 1 webhook", row)
	}
}
