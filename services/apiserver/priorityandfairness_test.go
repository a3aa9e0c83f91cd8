package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// pfResponse is what a request's response says of API Priority and Fairness.
type pfResponse struct {
	code                 int
	flowSchema, priority string // the X-Kubernetes-PF-* UIDs
	retryAfter, body     string
}

// pfDo sends method path (with body, JSON) as cfg's user and reads the response.
func pfDo(t *testing.T, cfg *rest.Config, method, path string, body []byte) pfResponse {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, cfg.Host+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return pfResponse{
		code:       resp.StatusCode,
		flowSchema: resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID),
		priority:   resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID),
		retryAfter: resp.Header.Get("Retry-After"),
		body:       string(data),
	}
}

// pfNames maps the UIDs of the stored FlowSchemas and PriorityLevelConfigurations to
// their names.
func pfNames(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]string {
	t.Helper()
	names := map[string]string{}
	schemas, err := cs.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range schemas.Items {
		names[string(fs.UID)] = fs.Name
	}
	levels, err := cs.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range levels.Items {
		names[string(pl.UID)] = pl.Name
	}
	return names
}

// TestPriorityAndFairnessClassifiesByTheBootstrapFlowSchemas: every request carries the
// UIDs of the FlowSchema and priority level that classified it, and skiff's identities
// land where kube's bootstrap configuration puts kube's: the admin exempt, a node's
// Node and Lease node-high and its other requests system, the scheduler and the controller-manager workload-high, their leader
// election leader-election, service accounts workload-low (kube-system's
// workload-high), other users global-default, health probes exempt.
func TestPriorityAndFairnessClassifiesByTheBootstrapFlowSchemas(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Once the config controller has the stored bootstrap objects, the admin's requests
	// name the stored exempt FlowSchema.
	var names map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, "global-default", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		names = pfNames(t, ctx, cs)
		r := pfDo(t, srv.Config, "GET", "/api/v1/namespaces", nil)
		return names[r.flowSchema] == flowcontrolv1.FlowSchemaNameExempt, nil
	}); err != nil {
		t.Fatalf("the admin's requests are never classified by the stored exempt FlowSchema: %v", err)
	}

	saToken := func(namespace, name string) *rest.Config {
		if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return srv.TokenConfig(tr.Status.Token)
	}
	tests := []struct {
		name                 string
		cfg                  *rest.Config
		method, path         string
		flowSchema, priority string
	}{
		{"the admin", srv.Config, "GET", "/api/v1/pods", "exempt", "exempt"},
		{"a node", srv.ClientConfig("system:node:node-a", "system:nodes"), "GET", "/api/v1/nodes/node-a", "system-node-high", "node-high"},
		{"a node's Lease", srv.ClientConfig("system:node:node-a", "system:nodes"), "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a", "system-node-high", "node-high"},
		{"a node's pods", srv.ClientConfig("system:node:node-a", "system:nodes"), "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", "system-nodes", "system"},
		{"the scheduler", srv.ClientConfig(pki.Scheduler.CommonName), "GET", "/api/v1/pods", "kube-scheduler", "workload-high"},
		{"the scheduler's leader election", srv.ClientConfig(pki.Scheduler.CommonName), "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler", "system-leader-election", "leader-election"},
		{"the controller-manager", srv.ClientConfig(pki.ControllerManager.CommonName), "GET", "/api/v1/pods", "kube-controller-manager", "workload-high"},
		{"the controller-manager's leader election", srv.ClientConfig(pki.ControllerManager.CommonName), "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager", "system-leader-election", "leader-election"},
		{"a service account", saToken("default", "apf-sa"), "GET", "/api/v1/namespaces/default/configmaps", "service-accounts", "workload-low"},
		{"a kube-system service account", saToken("kube-system", "apf-sa"), "GET", "/api/v1/namespaces/kube-system/configmaps", "kube-system-service-accounts", "workload-high"},
		{"another user", srv.ClientConfig("alice"), "GET", "/api/v1/namespaces/default/configmaps", "global-default", "global-default"},
		{"an anonymous health probe", srv.AnonymousConfig(), "GET", "/readyz", "probes", "exempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pfDo(t, tt.cfg, tt.method, tt.path, nil)
			if got, want := names[r.flowSchema]+"/"+names[r.priority], tt.flowSchema+"/"+tt.priority; got != want {
				t.Errorf("%s %s (%d): classified %s (UIDs %q, %q), want %s", tt.method, tt.path, r.code, got, r.flowSchema, r.priority, want)
			}
		})
	}

	t.Run("metrics and debug dumps", func(t *testing.T) {
		r := pfDo(t, srv.Config, "GET", "/metrics", nil)
		if r.code != http.StatusOK || !strings.Contains(r.body, "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"workload-low\"}") ||
			!strings.Contains(r.body, "apiserver_flowcontrol_dispatched_requests_total") {
			t.Errorf("/metrics (%d) lacks the apiserver_flowcontrol_ metrics", r.code)
		}
		if r := pfDo(t, srv.Config, "GET", "/debug/api_priority_and_fairness/dump_priority_levels", nil); r.code != http.StatusOK || !strings.Contains(r.body, "workload-low") {
			t.Errorf("dump_priority_levels as the admin: %d %s", r.code, r.body)
		}
		if r := pfDo(t, srv.ClientConfig("alice"), "GET", "/debug/api_priority_and_fairness/dump_priority_levels", nil); r.code != http.StatusForbidden {
			t.Errorf("dump_priority_levels as alice: %d, want 403", r.code)
		}
	})
}

// TestPriorityAndFairnessRejectsAFloodOfItsLevel: a priority level of a few seats that
// rejects rather than queues, for one user's configmap creates, each held in a
// validating webhook until the test lets it go: once the level's seats are all held,
// the user's next create is answered 429 with Retry-After and kube's body, naming the
// FlowSchema and the level, while the admin (exempt) and another user (global-default)
// are still served. The held creates then complete.
func TestPriorityAndFairnessRejectsAFloodOfItsLevel(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "apf-flood"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"apf-test": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flooder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "flooder"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pl, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apf-tiny"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := cs.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "apf-tiny"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name},
			MatchingPrecedence:         100,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "flooder"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{""},
					Resources: []string{"configmaps"}, Namespaces: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	flooder := srv.ClientConfig("flooder")
	// The config controller has them once the flooder's requests name them.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		r := pfDo(t, flooder, "GET", "/api/v1/namespaces/"+ns+"/configmaps", nil)
		return r.flowSchema == string(fs.UID) && r.priority == string(pl.UID) && r.code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the flooder's requests are never classified by apf-tiny: %v", err)
	}
	// The controller maintains the schema's status: its level exists.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, fs.Name, metav1.GetOptions{})
		return err == nil && danglingStatus(got) == flowcontrolv1.ConditionFalse, nil
	}); err != nil {
		t.Errorf("apf-tiny never got Dangling=False: %v", err)
	}

	hold := startHoldingWebhook(t)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apf-hold"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "hold.apf.skiff.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hold.url), CABundle: hold.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"apf-test": ns}},
			SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds: ptr.To[int32](30),
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook is in force once the admin's create (exempt) reaches it.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		hold.pass <- struct{}{}
		defer func() {
			select {
			case <-hold.pass:
			default:
			}
		}()
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(hold.pass) == 0, nil
	}); err != nil {
		t.Fatalf("the holding webhook never took effect: %v", err)
	}

	// The flooder's creates, one after the other: each either reaches the webhook and is
	// held there, holding its seat, or is answered at once.
	var held []chan pfResponse
	var rejected *pfResponse
	for i := 0; i < 50 && rejected == nil; i++ {
		done := make(chan pfResponse, 1)
		body, _ := json.Marshal(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d", i)}})
		go func() { done <- pfDo(t, flooder, "POST", "/api/v1/namespaces/"+ns+"/configmaps", body) }()
		select {
		case <-hold.entered:
			held = append(held, done)
		case r := <-done:
			rejected = &r
		case <-ctx.Done():
			t.Fatal("a create was neither held nor answered")
		}
	}
	if len(held) == 0 || rejected == nil {
		close(hold.release)
		t.Fatalf("%d creates held, rejected: %+v; want some held, then one rejected", len(held), rejected)
	}
	t.Logf("%d creates held the level's seats", len(held))
	if rejected.code != http.StatusTooManyRequests || rejected.retryAfter == "" ||
		rejected.body != "Too many requests, please try again later.\n" {
		t.Errorf("the create beyond the seats: %d, Retry-After %q, body %q; want 429 with Retry-After and kube's body", rejected.code, rejected.retryAfter, rejected.body)
	}
	if rejected.flowSchema != string(fs.UID) || rejected.priority != string(pl.UID) {
		t.Errorf("the 429 names FlowSchema %q and level %q, want apf-tiny's %q and %q", rejected.flowSchema, rejected.priority, fs.UID, pl.UID)
	}
	// The others are served meanwhile, each by its own level.
	names := pfNames(t, ctx, cs)
	if r := pfDo(t, srv.Config, "GET", "/api/v1/namespaces/"+ns+"/configmaps", nil); r.code != http.StatusOK || names[r.flowSchema] != "exempt" {
		t.Errorf("the admin while the flooder's seats are held: %d by %q, want 200 by exempt", r.code, names[r.flowSchema])
	}
	if r := pfDo(t, srv.ClientConfig("alice"), "GET", "/api/v1/namespaces/"+ns+"/configmaps", nil); r.code != http.StatusForbidden || names[r.flowSchema] != "global-default" {
		t.Errorf("alice while the flooder's seats are held: %d by %q, want 403 (served, not allowed) by global-default", r.code, names[r.flowSchema])
	}

	close(hold.release)
	for _, done := range held {
		if r := <-done; r.code != http.StatusCreated {
			t.Errorf("a held create: %d %s", r.code, r.body)
		}
	}
}

// danglingStatus is fs's Dangling condition's status ("" without one).
func danglingStatus(fs *flowcontrolv1.FlowSchema) flowcontrolv1.ConditionStatus {
	for _, c := range fs.Status.Conditions {
		if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
			return c.Status
		}
	}
	return ""
}

// holdingWebhook is a validating admission webhook that allows everything: a review
// finding a token in pass takes it and is answered at once; any other is announced on
// entered and answered once release is closed.
type holdingWebhook struct {
	url     string
	caPEM   []byte
	pass    chan struct{}
	entered chan struct{}
	release chan struct{}
}

func startHoldingWebhook(t *testing.T) *holdingWebhook {
	t.Helper()
	h := &holdingWebhook{pass: make(chan struct{}, 1), entered: make(chan struct{}), release: make(chan struct{})}
	ca, err := pki.NewCA("apf-webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServing("webhook", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	h.caPEM = ca.CertPEM
	ws := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		select {
		case <-h.pass:
		default:
			select {
			case h.entered <- struct{}{}:
			case <-r.Context().Done():
				return
			}
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	}))
	ws.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ws.StartTLS()
	t.Cleanup(ws.Close)
	h.url = ws.URL + "/hold"
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

// TestPriorityAndFairnessDisabled: with EnablePriorityAndFairness false (kube's
// --enable-priority-and-fairness=false) requests go through max-in-flight and carry no
// classification.
func TestPriorityAndFairnessDisabled(t *testing.T) {
	srv := controlplanetest.StartServerWithoutControllers(t, func(c *apiserver.Config) { c.EnablePriorityAndFairness = false })
	r := pfDo(t, srv.Config, "GET", "/api/v1/namespaces", nil)
	if r.code != http.StatusOK || r.flowSchema != "" || r.priority != "" {
		t.Errorf("GET as the admin: %d, PF headers %q %q; want 200 without them", r.code, r.flowSchema, r.priority)
	}
	if r := pfDo(t, srv.Config, "GET", "/debug/api_priority_and_fairness/dump_priority_levels", nil); r.code != http.StatusNotFound {
		t.Errorf("dump_priority_levels without APF: %d, want 404", r.code)
	}
}
