package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// vapTest is one subtest's namespace, labelled vap-test=<namespace>: its policies match
// that label only, so they touch nothing else.
type vapTest struct {
	t         *testing.T
	cs        kubernetes.Interface
	namespace string
}

func newVAPTest(t *testing.T, cs kubernetes.Interface, namespace string) *vapTest {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"vap-test": namespace}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{}) })
	return &vapTest{t: t, cs: cs, namespace: namespace}
}

// policy is a policy named <namespace>.policies.skiff.dev over creates and updates of
// apps/v1 deployments in the test's namespace, with validations.
func (vt *vapTest) policy(validations ...admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: vt.namespace + ".policies.skiff.dev"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"vap-test": vt.namespace}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: validations,
		},
	}
}

// binding binds policyName with actions, named <namespace>-<suffix>.
func (vt *vapTest) binding(suffix, policyName string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vt.namespace + "-" + suffix},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policyName, ValidationActions: actions},
	}
}

func (vt *vapTest) createPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	vt.t.Helper()
	out, err := vt.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		vt.t.Fatalf("create policy: %v", err)
	}
	vt.t.Cleanup(func() {
		_ = vt.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), out.Name, metav1.DeleteOptions{})
	})
	return out
}

func (vt *vapTest) createBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	vt.t.Helper()
	out, err := vt.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(), b, metav1.CreateOptions{})
	if err != nil {
		vt.t.Fatalf("create binding: %v", err)
	}
	vt.t.Cleanup(func() {
		_ = vt.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), out.Name, metav1.DeleteOptions{})
	})
	return out
}

// deployment is an nginx Deployment of the test's namespace with replicas and labels
// (k, v, k, v...).
func (vt *vapTest) deployment(name string, replicas int32, kv ...string) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx"}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vt.namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nginx"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
}

// tryDeployment is a dry-run create of d.
func (vt *vapTest) tryDeployment(d *appsv1.Deployment) error {
	_, err := vt.cs.AppsV1().Deployments(vt.namespace).Create(context.Background(), d.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// deniedBy waits until a dry-run create of d is refused (policies take effect once the
// watch caches hold them and their bindings), and returns the refusal.
func (vt *vapTest) deniedBy(d *appsv1.Deployment) error {
	vt.t.Helper()
	var refusal error
	until(vt.t, "the policy takes effect", func() error {
		if refusal = vt.tryDeployment(d); refusal == nil {
			return errors.New("still admitted")
		}
		return nil
	})
	return refusal
}

// waitInEffect makes sure every policy and binding created so far is in force: it
// creates a marker policy that warns on every deployment of the namespace, bound with
// Warn, and waits until a dry-run create gets the marker's warning. The watch caches
// deliver in order, so the policies and bindings created before the marker are in
// force with it.
func (vt *vapTest) waitInEffect(warnings *warningRecorder) {
	vt.t.Helper()
	marker := vt.policy(admissionregistrationv1.Validation{Expression: "false", Message: "marker of " + vt.namespace})
	marker.Name = "marker." + marker.Name
	marker = vt.createPolicy(marker)
	b := vt.createBinding(vt.binding("marker", marker.Name, admissionregistrationv1.Warn))
	want := fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': marker of %s", marker.Name, b.Name, vt.namespace)
	until(vt.t, "the marker policy's warning", func() error {
		_ = vt.tryDeployment(vt.deployment("marker", 1))
		if !warnings.has(want) {
			return errors.New("no marker warning yet")
		}
		return nil
	})
}

// wantStatus checks err is a status error with code, reason and message.
func wantStatus(t *testing.T, err error, code int32, reason metav1.StatusReason, message string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error %v: want a status error", err)
	}
	s := status.Status()
	if s.Code != code || s.Reason != reason || s.Message != message {
		t.Fatalf("status %d %s %q, want %d %s %q", s.Code, s.Reason, s.Message, code, reason, message)
	}
}

// TestValidatingAdmissionPolicy runs policies and bindings against a real apiserver,
// each subtest in a namespace of its own.
func TestValidatingAdmissionPolicy(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	warnings := &warningRecorder{}
	config := rest.CopyConfig(srv.Config)
	config.WarningHandler = warnings
	cs := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()

	t.Run("a Deny binding refuses deployments over the limit with kube's message", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-deny")
		p := vt.createPolicy(vt.policy(
			admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 3", Message: "at most 3 replicas"},
			admissionregistrationv1.Validation{Expression: "namespaceObject.metadata.name == '" + vt.namespace + "'", Message: "another namespace"},
		))
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		err := vt.deniedBy(vt.deployment("big", 4))
		want := fmt.Sprintf(`deployments.apps "big" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: at most 3 replicas`, p.Name, b.Name)
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, want)
		if !apierrors.IsInvalid(err) {
			t.Errorf("IsInvalid(%v) = false", err)
		}
		// Within the limit, and the namespace is the one namespaceObject names.
		d, err := cs.AppsV1().Deployments(vt.namespace).Create(ctx, vt.deployment("small", 3), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("3 replicas: %v", err)
		}
		// Updates are matched too.
		d.Spec.Replicas = ptr.To[int32](5)
		if _, err := cs.AppsV1().Deployments(vt.namespace).Update(ctx, d, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("update to 5 replicas: %v, want 422", err)
		}
		// Other kinds are not.
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](9),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx"}}, Template: vt.deployment("x", 1).Spec.Template}}
		if _, err := cs.AppsV1().ReplicaSets(vt.namespace).Create(ctx, rs, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("a ReplicaSet of 9: %v", err)
		}
	})

	t.Run("a validation's reason sets the code, messageExpression the message", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-reason")
		p := vt.createPolicy(vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 3",
			MessageExpression: "'wants at most 3 replicas, got ' + string(object.spec.replicas)", Reason: ptr.To(metav1.StatusReasonForbidden)}))
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		err := vt.deniedBy(vt.deployment("big", 7))
		wantStatus(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			`deployments.apps "big" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: wants at most 3 replicas, got 7`, p.Name, b.Name))
	})

	t.Run("a Warn binding admits with a warning, an Audit one silently", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-warn")
		p := vt.createPolicy(vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 3", Message: "at most 3 replicas"}))
		// The Audit binding first: in force once the Warn one is.
		audit := vt.createBinding(vt.binding("audit", p.Name, admissionregistrationv1.Audit))
		warn := vt.createBinding(vt.binding("warn", p.Name, admissionregistrationv1.Warn))
		want := fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': at most 3 replicas", p.Name, warn.Name)
		until(t, "the warning", func() error {
			if err := vt.tryDeployment(vt.deployment("big", 5)); err != nil {
				return fmt.Errorf("refused: %w", err)
			}
			if !warnings.has(want) {
				return errors.New("no warning yet")
			}
			return nil
		})
		// Audit: admitted, no warning (skiff keeps no audit log).
		if quiet := fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': at most 3 replicas", p.Name, audit.Name); warnings.has(quiet) {
			t.Fatalf("an Audit binding warned: %q", quiet)
		}
	})

	t.Run("params from a ConfigMap by name", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-param-name")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= int(params.data.maxReplicas)",
			MessageExpression: "'at most ' + params.data.maxReplicas + ' replicas'"})
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		p := vt.createPolicy(policy)
		b := vt.binding("deny", p.Name, admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
		b = vt.createBinding(b)
		// No param yet: parameterNotFoundAction Deny refuses everything.
		err := vt.deniedBy(vt.deployment("one", 1))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			"deployments.apps \"one\" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction", p.Name, b.Name))
		// The param, in the request's namespace.
		if _, err := cs.CoreV1().ConfigMaps(vt.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"},
			Data: map[string]string{"maxReplicas": "2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Read at once: the registry is read when its cache lags.
		if err := vt.tryDeployment(vt.deployment("two", 2)); err != nil {
			t.Fatalf("2 replicas with maxReplicas 2: %v", err)
		}
		wantStatus(t, vt.tryDeployment(vt.deployment("three", 3)), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "three" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: at most 2 replicas`, p.Name, b.Name))
	})

	t.Run("params by selector, parameterNotFoundAction Allow", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-param-selector")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= int(params.data.maxReplicas)",
			MessageExpression: "'at most ' + params.data.maxReplicas + ' replicas (' + params.metadata.name + ')'"})
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		p := vt.createPolicy(policy)
		b := vt.binding("deny", p.Name, admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Namespace: vt.namespace,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"limits": "true"}}, ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)}
		b = vt.createBinding(b)
		vt.waitInEffect(warnings)
		// The policy is bound, but no param is selected: Allow admits.
		if err := vt.tryDeployment(vt.deployment("many", 9)); err != nil {
			t.Fatalf("no param selected, Allow: %v", err)
		}
		for name, max := range map[string]string{"loose": "5", "tight": "2", "unselected": "1"} {
			labels := map[string]string{"limits": "true"}
			if name == "unselected" {
				labels = nil
			}
			if _, err := cs.CoreV1().ConfigMaps(vt.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: labels}, Data: map[string]string{"maxReplicas": max}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Each selected param is evaluated: the tight one refuses 3.
		err := vt.deniedBy(vt.deployment("three", 3))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "three" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: at most 2 replicas (tight)`, p.Name, b.Name))
		if err := vt.tryDeployment(vt.deployment("two", 2)); err != nil {
			t.Fatalf("2 replicas: %v", err)
		}
	})

	t.Run("variables", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-variables")
		policy := vt.policy(
			admissionregistrationv1.Validation{Expression: "variables.replicas > 1"},
			admissionregistrationv1.Validation{Expression: "variables.oddReplicas", MessageExpression: "'odd replicas only, not ' + string(variables.replicas)"},
		)
		policy.Spec.Variables = []admissionregistrationv1.Variable{
			{Name: "replicas", Expression: "object.spec.replicas"},
			{Name: "oddReplicas", Expression: "variables.replicas % 2 == 1"},
		}
		p := vt.createPolicy(policy)
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		err := vt.deniedBy(vt.deployment("one", 1))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "one" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: failed expression: variables.replicas > 1`, p.Name, b.Name))
		wantStatus(t, vt.tryDeployment(vt.deployment("four", 4)), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "four" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: odd replicas only, not 4`, p.Name, b.Name))
		if err := vt.tryDeployment(vt.deployment("three", 3)); err != nil {
			t.Fatalf("3 replicas: %v", err)
		}
	})

	t.Run("matchConditions exclude requests", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-conditions")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 3"})
		policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-exempt", Expression: "!('exempt' in object.metadata.labels)"}}
		p := vt.createPolicy(policy)
		vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		vt.deniedBy(vt.deployment("big", 4))
		if err := vt.tryDeployment(vt.deployment("big", 4, "exempt", "yes")); err != nil {
			t.Fatalf("an exempt deployment: %v", err)
		}
	})

	t.Run("a binding's namespaceSelector and objectSelector narrow the policy", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-selectors")
		p := vt.createPolicy(vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 3"}))
		b := vt.binding("deny", p.Name, admissionregistrationv1.Deny)
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			ObjectSelector:    &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"batch"}}}},
		}
		vt.createBinding(b)
		vt.waitInEffect(warnings)
		// The namespace is not env=prod: nothing is refused.
		if err := vt.tryDeployment(vt.deployment("big", 4)); err != nil {
			t.Fatalf("outside the binding's namespaces: %v", err)
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, vt.namespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels["env"] = "prod"
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		vt.deniedBy(vt.deployment("big", 4))
		if err := vt.tryDeployment(vt.deployment("big", 4, "tier", "batch")); err != nil {
			t.Fatalf("an object the objectSelector excludes: %v", err)
		}
	})

	t.Run("failurePolicy Fail refuses on a runtime error, Ignore admits", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-failure")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.metadata.labels['owner'] != ''"})
		p := vt.createPolicy(policy)
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		err := vt.deniedBy(vt.deployment("unowned", 1))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "unowned" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: expression 'object.metadata.labels['owner'] != ''' resulted in error: no such key: owner`, p.Name, b.Name))
		if err := vt.tryDeployment(vt.deployment("owned", 1, "owner", "me")); err != nil {
			t.Fatalf("an owned deployment: %v", err)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, p.Name, types.MergePatchType,
			[]byte(`{"spec":{"failurePolicy":"Ignore"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "Ignore takes effect", func() error { return vt.tryDeployment(vt.deployment("unowned", 1)) })
	})

	t.Run("a binding to a missing policy does nothing until the policy exists", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-missing")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "false", Message: "never"})
		vt.createBinding(vt.binding("deny", policy.Name, admissionregistrationv1.Deny))
		vt.waitInEffect(warnings)
		if err := vt.tryDeployment(vt.deployment("d", 1)); err != nil {
			t.Fatalf("bound to no policy: %v", err)
		}
		vt.createPolicy(policy)
		vt.deniedBy(vt.deployment("d", 1))
	})

	t.Run("CEL's authorizer is the apiserver's", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-authorizer")
		p := vt.createPolicy(vt.policy(admissionregistrationv1.Validation{
			Expression: "authorizer.requestResource.check('delete').allowed()", Message: "only those who may delete may create"}))
		vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		// alice may create deployments in the namespace, not delete them.
		if _, err := cs.RbacV1().Roles(vt.namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "creator"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"create"}, APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().RoleBindings(vt.namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "creator"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "creator"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		alice := kubernetes.NewForConfigOrDie(srv.ClientConfig("alice"))
		var err error
		until(t, "alice is refused by the policy", func() error {
			_, err = alice.AppsV1().Deployments(vt.namespace).Create(ctx, vt.deployment("d", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsInvalid(err) {
				return fmt.Errorf("alice: %v", err)
			}
			return nil
		})
		if !strings.HasSuffix(err.Error(), "only those who may delete may create") {
			t.Fatalf("alice: %v", err)
		}
		// The admin may delete.
		if err := vt.tryDeployment(vt.deployment("d", 1)); err != nil {
			t.Fatalf("admin: %v", err)
		}
	})

	t.Run("bad policies and bindings are 422 with kube's field paths", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-invalid")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <"})
		_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
		wantCause(t, err, "spec.validations[0].expression", "compilation failed: ERROR: <input>:1:23: Syntax error")
		policy = vt.policy(admissionregistrationv1.Validation{Expression: "true"})
		policy.Spec.MatchConstraints.ResourceRules = nil
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
		wantCause(t, err, "spec.matchConstraints.resourceRules", "Required value")
		b := vt.binding("both", "p.example.com", admissionregistrationv1.Deny, admissionregistrationv1.Warn)
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		wantCause(t, err, "spec.validationActions", "must not contain both Deny and Warn")
		b = vt.binding("param", "p.example.com", admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x"}
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		wantCause(t, err, "spec.paramRef.parameterNotFoundAction", "Required value")
	})

	t.Run("status.typeChecking warns of type errors and missing fields", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-typecheck")
		correct := vt.createPolicy(vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas > 1"}))
		confused := vt.policy(
			admissionregistrationv1.Validation{Expression: "object.spec.replicas > '1'", MessageExpression: "'wants replicas > 1, got ' + object.spec.replicas"},
			admissionregistrationv1.Validation{Expression: "object.spec.maxRetries < 10"},
		)
		confused.Name = "confused." + confused.Name
		confused = vt.createPolicy(confused)
		checked := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
			var p *admissionregistrationv1.ValidatingAdmissionPolicy
			until(t, "type checking of "+name, func() error {
				var err error
				if p, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
					return err
				}
				if p.Status.TypeChecking == nil {
					return errors.New("not checked yet")
				}
				return nil
			})
			return p
		}
		if p := checked(correct.Name); len(p.Status.TypeChecking.ExpressionWarnings) != 0 || p.Status.ObservedGeneration != p.Generation {
			t.Errorf("correct policy: status %+v (generation %d), want no warnings", p.Status, p.Generation)
		}
		p := checked(confused.Name)
		w := p.Status.TypeChecking.ExpressionWarnings
		if len(w) != 3 {
			t.Fatalf("warnings %+v, want 3", w)
		}
		for i, want := range []struct{ fieldRef, warning string }{
			{"spec.validations[0].expression", "apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_>_' applied to '(int, string)'"},
			{"spec.validations[0].messageExpression", "found no matching overload for '_+_' applied to '(string, int)'"},
			{"spec.validations[1].expression", "undefined field 'maxRetries'"},
		} {
			if w[i].FieldRef != want.fieldRef || !strings.Contains(w[i].Warning, want.warning) {
				t.Errorf("warning %d: %+v, want %s with %q", i, w[i], want.fieldRef, want.warning)
			}
		}
		// A spec change is checked again: observedGeneration follows.
		p.Spec.Validations = p.Spec.Validations[:1]
		p.Spec.Validations[0] = admissionregistrationv1.Validation{Expression: "object.spec.replicas > 1"}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "the update is checked", func() error {
			p, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, confused.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Generation != 2 || p.Status.ObservedGeneration != 2 || len(p.Status.TypeChecking.ExpressionWarnings) != 0 {
				return fmt.Errorf("generation %d, status %+v", p.Generation, p.Status)
			}
			return nil
		})
	})

	t.Run("matchPolicy Equivalent matches core Events as events.k8s.io Events", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-equivalent")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.note != 'forbidden'", MessageExpression: "object.kind + ' ' + object.apiVersion"})
		policy.Spec.MatchConstraints.ResourceRules[0].Rule = admissionregistrationv1.Rule{APIGroups: []string{"events.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"events"}}
		p := vt.createPolicy(policy)
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		event := func(message string) *corev1.Event {
			return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: vt.namespace},
				Reason: "Made", Message: message, Source: corev1.EventSource{Component: "kubelet", Host: "n1"}, Count: 1, Type: "Normal",
				FirstTimestamp: metav1.NewTime(time.Unix(1505828000, 0)), LastTimestamp: metav1.NewTime(time.Unix(1505828900, 0))}
		}
		var err error
		until(t, "the policy refuses a core Event", func() error {
			_, err = cs.CoreV1().Events(vt.namespace).Create(ctx, event("forbidden"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return errors.New("still admitted")
			}
			return nil
		})
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`events "e" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: Event events.k8s.io/v1`, p.Name, b.Name))
		if _, err := cs.CoreV1().Events(vt.namespace).Create(ctx, event("fine"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("an event of another note: %v", err)
		}
		// Exact: the core Event is not matched.
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, p.Name, types.MergePatchType,
			[]byte(`{"spec":{"matchConstraints":{"matchPolicy":"Exact"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "Exact takes effect", func() error {
			_, err := cs.CoreV1().Events(vt.namespace).Create(ctx, event("forbidden"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
	})

	t.Run("a CONNECT to pods/exec is matched, its options as the object", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-connect")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "!object.command.exists(c, c == 'rm')",
			MessageExpression: "object.kind + ': no rm'"})
		policy.Spec.MatchConstraints.ResourceRules[0].RuleWithOperations = admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/exec"}},
		}
		p := vt.createPolicy(policy)
		b := vt.createBinding(vt.binding("deny", p.Name, admissionregistrationv1.Deny))
		exec := func(command string) error {
			return cs.CoreV1().RESTClient().Post().Namespace(vt.namespace).Resource("pods").Name("p").SubResource("exec").
				Param("container", "c").Param("command", command).Param("stdout", "true").Do(ctx).Error()
		}
		var err error
		until(t, "the policy refuses exec of rm", func() error {
			if err = exec("rm"); !apierrors.IsInvalid(err) {
				return fmt.Errorf("exec rm: %v", err)
			}
			return nil
		})
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`pods "p" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: PodExecOptions: no rm`, p.Name, b.Name))
		// Another command gets past admission (to the 404 of a pod that is not there).
		if err := exec("ls"); apierrors.IsInvalid(err) {
			t.Fatalf("exec ls: %v", err)
		}
	})

	t.Run("an unknown paramKind fails the policy", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-unknown-param")
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "true"})
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "nothing.skiff.dev/v1", Kind: "Nothing"}
		p := vt.createPolicy(policy)
		b := vt.binding("deny", p.Name, admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x", ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)}
		vt.createBinding(b)
		err := vt.deniedBy(vt.deployment("d", 1))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "d" is forbidden: ValidatingAdmissionPolicy '%s' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'nothing.skiff.dev/v1, Kind=Nothing'`, p.Name))
	})

	t.Run("custom resources as params and in type checking", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-crd")
		createEstablishedCRD(ctx, t, srv.Config, limitsCRD())
		limits := dynamic.NewForConfigOrDie(srv.Config).Resource(schema.GroupVersionResource{Group: "vap.skiff.dev", Version: "v1", Resource: "limits"})
		if _, err := limits.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "vap.skiff.dev/v1", "kind": "Limit", "metadata": map[string]interface{}{"name": vt.namespace},
			"spec": map[string]interface{}{"maxReplicas": int64(2)},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		policy := vt.policy(admissionregistrationv1.Validation{Expression: "object.spec.replicas <= params.spec.maxReplicas",
			MessageExpression: "'at most ' + string(params.spec.maxReplicas) + ' replicas'"})
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "vap.skiff.dev/v1", Kind: "Limit"}
		p := vt.createPolicy(policy)
		b := vt.binding("deny", p.Name, admissionregistrationv1.Deny)
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: vt.namespace, ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
		b = vt.createBinding(b)
		err := vt.deniedBy(vt.deployment("three", 3))
		wantStatus(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			`deployments.apps "three" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: at most 2 replicas`, p.Name, b.Name))
		if err := vt.tryDeployment(vt.deployment("two", 2)); err != nil {
			t.Fatalf("2 replicas: %v", err)
		}
		// A policy over the custom resource is type-checked against its schema.
		crPolicy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "limits." + vt.namespace + ".policies.skiff.dev"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{"vap.skiff.dev"}, APIVersions: []string{"v1"}, Resources: []string{"limits"}}},
				}}},
				Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.maxReplicas > '1'"}, {Expression: "object.spec.maxRetries < 10"}},
			},
		}
		crPolicy = vt.createPolicy(crPolicy)
		until(t, "the custom resource policy is type-checked", func() error {
			got, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, crPolicy.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.TypeChecking == nil {
				return errors.New("not checked yet")
			}
			w := got.Status.TypeChecking.ExpressionWarnings
			if len(w) != 2 || !strings.Contains(w[0].Warning, "found no matching overload for '_>_' applied to '(int, string)'") ||
				w[1].FieldRef != "spec.validations[1].expression" || !strings.Contains(w[1].Warning, "undefined field 'maxRetries'") {
				return fmt.Errorf("warnings %+v", w)
			}
			return nil
		})
	})

	t.Run("the example of docs/api.md", func(t *testing.T) {
		vt := newVAPTest(t, cs, "vap-example")
		ns, err := cs.CoreV1().Namespaces().Get(ctx, vt.namespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels["team"] = "payments"
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := vt.createPolicy(&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "replica-limit.example.com"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}},
				}}},
				Variables: []admissionregistrationv1.Variable{{Name: "max", Expression: "int(params.data.maxReplicas)"}},
				Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= variables.max",
					MessageExpression: "'at most ' + string(variables.max) + ' replicas'"}},
			},
		})
		vt.createBinding(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "replica-limit-payments"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
				MatchResources: &admissionregistrationv1.MatchResources{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}}},
		})
		vt.deniedBy(vt.deployment("web", 1)) // no limits ConfigMap yet
		if _, err := cs.CoreV1().ConfigMaps(vt.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"},
			Data: map[string]string{"maxReplicas": "2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, vt.tryDeployment(vt.deployment("web", 3)), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'replica-limit.example.com' with binding 'replica-limit-payments' denied request: at most 2 replicas`)
		if err := vt.tryDeployment(vt.deployment("web", 2)); err != nil {
			t.Fatalf("2 replicas: %v", err)
		}
	})

	t.Run("the ValidatingAdmissionPolicy API operations, as the conformance test drives them", func(t *testing.T) {
		vapAPIOperations(t, srv.Config, cs)
	})

	t.Run("the ValidatingAdmissionPolicyBinding API operations, as the conformance test drives them", func(t *testing.T) {
		vapbAPIOperations(t, cs)
	})
}

// limitsCRD declares the cluster-scoped vap.skiff.dev/v1 Limit, whose spec.maxReplicas
// is an integer.
func limitsCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "limits.vap.skiff.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "vap.skiff.dev", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "limits", Singular: "limit", Kind: "Limit"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"maxReplicas": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
}

// wantCause checks err is a 422 Invalid with a cause at field whose message holds msg.
func wantCause(t *testing.T, err error, field, msg string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity || status.Status().Details == nil {
		t.Fatalf("error %v: want a 422", err)
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == field && strings.Contains(c.Message, msg) {
			return
		}
	}
	t.Fatalf("causes %+v: want one at %s with %q", status.Status().Details.Causes, field, msg)
}

// watchSawAnnotation waits for a Modified event of an object annotated patched=true on
// w, every event before it a Modified one, as the conformance tests wait.
func watchSawAnnotation(t *testing.T, w watch.Interface, annotations func(watch.Event) (map[string]string, bool)) {
	t.Helper()
	defer w.Stop()
	for {
		select {
		case evt, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if evt.Type != watch.Modified {
				t.Fatalf("event %s, want Modified", evt.Type)
			}
			a, ok := annotations(evt)
			if !ok {
				t.Fatalf("event of %T", evt.Object)
			}
			if a["patched"] == "true" {
				return
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("no watch event with the annotation")
		}
	}
}

// vapAPIOperations is kube's "should support ValidatingAdmissionPolicy API operations".
func vapAPIOperations(t *testing.T, config *rest.Config, cs kubernetes.Interface) {
	ctx := context.Background()
	resources, err := cs.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, r := range resources.APIResources {
		found[r.Name] = true
	}
	if !found["validatingadmissionpolicies"] || !found["validatingadmissionpolicies/status"] || !found["validatingadmissionpolicybindings"] {
		t.Fatalf("discovery lists %v", found)
	}
	client := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	label := "example-e2e-vap-label=ops"
	template := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-example-vap-", Labels: map[string]string{"example-e2e-vap-label": "ops"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 100"}},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}},
			}}},
		},
	}
	t.Cleanup(func() {
		_ = client.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label})
	})
	var created *admissionregistrationv1.ValidatingAdmissionPolicy
	for range 3 {
		if created, err = client.Create(ctx, template, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if created.Spec.FailurePolicy == nil || *created.Spec.FailurePolicy != admissionregistrationv1.Fail ||
		created.Spec.MatchConstraints.MatchPolicy == nil || *created.Spec.MatchConstraints.MatchPolicy != admissionregistrationv1.Equivalent {
		t.Errorf("created without kube's defaults: %+v", created.Spec)
	}
	read, err := client.Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil || read.UID != created.UID {
		t.Fatalf("get: %v, %v", read, err)
	}
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %v items, %v", len(list.Items), err)
	}
	w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: label})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := client.Patch(ctx, created.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"patched":"true"}},"spec":{"failurePolicy":"Ignore"}}`), metav1.PatchOptions{})
	if err != nil || patched.Annotations["patched"] != "true" || *patched.Spec.FailurePolicy != admissionregistrationv1.Ignore {
		t.Fatalf("patch: %v, %v", patched, err)
	}
	var updated *admissionregistrationv1.ValidatingAdmissionPolicy
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Annotations["updated"] = "true"
		cur.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		updated, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil || updated.Annotations["updated"] != "true" || *updated.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Fatalf("update: %v, %v", updated, err)
	}
	watchSawAnnotation(t, w, func(evt watch.Event) (map[string]string, bool) {
		p, ok := evt.Object.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if !ok {
			return nil, false
		}
		return p.Annotations, true
	})

	dyn := dynamic.NewForConfigOrDie(config)
	status, err := dyn.Resource(admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")).Get(ctx, created.Name, metav1.GetOptions{}, "status")
	if err != nil || status.GetObjectKind().GroupVersionKind() != admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy") || status.GetUID() != created.UID {
		t.Fatalf("get status: %v, %v", status, err)
	}
	statusPatched, err := client.Patch(ctx, created.Name, types.MergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"PatchStatusFailed","status":"False","reason":"e2e","message":"Set from an e2e test","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`),
		metav1.PatchOptions{}, "status")
	if err != nil || !hasCondition(statusPatched, "PatchStatusFailed") {
		t.Fatalf("patch status: %v, %v", statusPatched, err)
	}
	var statusUpdated *admissionregistrationv1.ValidatingAdmissionPolicy
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Conditions = append(cur.Status.Conditions, metav1.Condition{Type: "StatusUpdateFailed", Status: metav1.ConditionFalse,
			Reason: "E2E", Message: "Set from an e2e test", LastTransitionTime: metav1.NewTime(time.Now())})
		cur.Spec.Validations = nil // the status subresource leaves the spec alone
		statusUpdated, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil || !hasCondition(statusUpdated, "StatusUpdateFailed") || len(statusUpdated.Spec.Validations) != 1 {
		t.Fatalf("update status: %v, %v", statusUpdated, err)
	}
	if err := client.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(ctx, created.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want 404", err)
	}
	if list, err = client.List(ctx, metav1.ListOptions{LabelSelector: label}); err != nil || len(list.Items) != 2 {
		t.Fatalf("list after delete: %d items, %v", len(list.Items), err)
	}
	if err := client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label}); err != nil {
		t.Fatal(err)
	}
	if list, err = client.List(ctx, metav1.ListOptions{LabelSelector: label}); err != nil || len(list.Items) != 0 {
		t.Fatalf("list after deletecollection: %d items, %v", len(list.Items), err)
	}
}

func hasCondition(p *admissionregistrationv1.ValidatingAdmissionPolicy, condition string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == condition {
			return true
		}
	}
	return false
}

// vapbAPIOperations is kube's "should support ValidatingAdmissionPolicyBinding API
// operations".
func vapbAPIOperations(t *testing.T, cs kubernetes.Interface) {
	ctx := context.Background()
	client := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	label := "example-e2e-vapb-label=ops"
	template := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-example-vapb-", Labels: map[string]string{"example-e2e-vapb-label": "ops"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicalimit-policy.example.com",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	t.Cleanup(func() {
		_ = client.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label})
	})
	var created *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	var err error
	for range 3 {
		if created, err = client.Create(ctx, template, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if read, err := client.Get(ctx, created.Name, metav1.GetOptions{}); err != nil || read.UID != created.UID {
		t.Fatalf("get: %v, %v", read, err)
	}
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %v", err)
	}
	w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: label})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := client.Patch(ctx, created.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"patched":"true"}},"spec":{"validationActions":["Warn"]}}`), metav1.PatchOptions{})
	if err != nil || patched.Annotations["patched"] != "true" || len(patched.Spec.ValidationActions) != 1 || patched.Spec.ValidationActions[0] != admissionregistrationv1.Warn {
		t.Fatalf("patch: %v, %v", patched, err)
	}
	var updated *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Annotations["updated"] = "true"
		cur.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
		updated, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil || updated.Annotations["updated"] != "true" || updated.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Fatalf("update: %v, %v", updated, err)
	}
	watchSawAnnotation(t, w, func(evt watch.Event) (map[string]string, bool) {
		b, ok := evt.Object.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		if !ok {
			return nil, false
		}
		return b.Annotations, true
	})
	if err := client.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(ctx, created.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want 404", err)
	}
	if list, err = client.List(ctx, metav1.ListOptions{LabelSelector: label}); err != nil || len(list.Items) != 2 {
		t.Fatalf("list after delete: %v", err)
	}
	if err := client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label}); err != nil {
		t.Fatal(err)
	}
	if list, err = client.List(ctx, metav1.ListOptions{LabelSelector: label}); err != nil || len(list.Items) != 0 {
		t.Fatalf("list after deletecollection: %v", err)
	}
}
