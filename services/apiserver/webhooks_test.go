package apiserver_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// webhookServer is a real admission webhook over TLS, its certificate from a CA of its
// own (the caBundle of the configurations that call it). Each path is one behaviour:
//
//	/deny-label  denies an object (or, on delete, old object) labelled deny=true: 403
//	/deny        denies everything, without explanation
//	/label       patches a label webhook-added=yes onto the object
//	/slow        answers after 3 s (or when the caller gives up)
//	/warn        allows, with a warning
//	/allow       allows
//
// Every review received is kept, by path.
type webhookServer struct {
	*httptest.Server
	caPEM []byte

	mu      sync.Mutex
	reviews map[string][]admissionv1.AdmissionRequest
}

// startWebhookServer serves on 127.0.0.1 with a certificate for 127.0.0.1 and dnsNames.
func startWebhookServer(t *testing.T, dnsNames ...string) *webhookServer {
	t.Helper()
	ca, err := pki.NewCA("webhook-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServing("webhook", append([]string{"127.0.0.1"}, dnsNames...), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ws := &webhookServer{caPEM: ca.CertPEM, reviews: map[string][]admissionv1.AdmissionRequest{}}
	ws.Server = httptest.NewUnstartedServer(http.HandlerFunc(ws.serve))
	ws.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ws.StartTLS()
	t.Cleanup(ws.Close)
	return ws
}

func (ws *webhookServer) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	ws.mu.Lock()
	ws.reviews[r.URL.Path] = append(ws.reviews[r.URL.Path], *req)
	ws.mu.Unlock()
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	switch r.URL.Path {
	case "/deny-label":
		raw := req.Object.Raw
		if req.Operation == admissionv1.Delete {
			raw = req.OldObject.Raw
		}
		var obj metav1.PartialObjectMetadata
		_ = json.Unmarshal(raw, &obj)
		if obj.Labels["deny"] == "true" {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
				Message: strings.ToLower(req.Kind.Kind) + " carries deny=true"}
		}
	case "/deny":
		resp.Allowed = false
	case "/label":
		var obj metav1.PartialObjectMetadata
		_ = json.Unmarshal(req.Object.Raw, &obj)
		patch := `[{"op":"add","path":"/metadata/labels","value":{"webhook-added":"yes"}}]`
		if obj.Labels != nil {
			patch = `[{"op":"add","path":"/metadata/labels/webhook-added","value":"yes"}]`
		}
		resp.Patch, resp.PatchType = []byte(patch), ptr.To(admissionv1.PatchTypeJSONPatch)
	case "/slow":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
	case "/warn":
		resp.Warnings = []string{"configmaps are watched by the warn webhook"}
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// received is what path was sent so far.
func (ws *webhookServer) received(path string) []admissionv1.AdmissionRequest {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]admissionv1.AdmissionRequest(nil), ws.reviews[path]...)
}

// clientConfig points at path on the server, trusting its CA.
func (ws *webhookServer) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(ws.URL + path), CABundle: ws.caPEM}
}

// webhookTest is one subtest's namespace, labelled webhook-test=<namespace> so that its
// configurations (whose namespaceSelector selects that label) touch nothing else.
type webhookTest struct {
	t         *testing.T
	cs        kubernetes.Interface
	namespace string
}

func newWebhookTest(t *testing.T, cs kubernetes.Interface, namespace string) *webhookTest {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"webhook-test": namespace}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{}) })
	return &webhookTest{t: t, cs: cs, namespace: namespace}
}

// selector selects the test's namespace.
func (wt *webhookTest) selector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"webhook-test": wt.namespace}}
}

// rule covers ops on resources of the core group.
func coreRule(resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources}}
}

// validating is a validating webhook name calling cc for rule in the test's namespace.
func (wt *webhookTest) validating(name string, cc admissionregistrationv1.WebhookClientConfig, rule admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: name, ClientConfig: cc, Rules: []admissionregistrationv1.RuleWithOperations{rule},
		NamespaceSelector: wt.selector(), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
	}
}

// createValidating stores a ValidatingWebhookConfiguration named after the test's
// namespace, deleted when the test ends.
func (wt *webhookTest) createValidating(hooks ...admissionregistrationv1.ValidatingWebhook) {
	wt.t.Helper()
	c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wt.namespace}, Webhooks: hooks}
	if _, err := wt.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		wt.t.Fatalf("create validating webhook configuration: %v", err)
	}
	wt.t.Cleanup(func() {
		_ = wt.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), wt.namespace, metav1.DeleteOptions{})
	})
}

// configMap is a ConfigMap of the test's namespace with labels (k, v, k, v...).
func (wt *webhookTest) configMap(name string, kv ...string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: wt.namespace, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		cm.Labels[kv[i]] = kv[i+1]
	}
	return cm
}

// createConfigMap creates cm, as a dry run when dryRun.
func (wt *webhookTest) createConfigMap(cm *corev1.ConfigMap, dryRun bool) (*corev1.ConfigMap, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return wt.cs.CoreV1().ConfigMaps(wt.namespace).Create(context.Background(), cm, opts)
}

// until retries f every 50 ms until it returns nil, for at most 15 s (a configuration
// takes effect once the watch cache has it), and returns f's last error.
func until(t *testing.T, what string, f func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

// deniedBy waits until a dry-run create of cm is refused, and returns the refusal.
func (wt *webhookTest) deniedBy(cm *corev1.ConfigMap) error {
	wt.t.Helper()
	var refusal error
	until(wt.t, "configuration takes effect", func() error {
		if _, refusal = wt.createConfigMap(cm.DeepCopy(), true); refusal == nil {
			return errors.New("still admitted")
		}
		return nil
	})
	return refusal
}

// warningRecorder keeps the Warning headers client-go hands it.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, text)
}

func (r *warningRecorder) has(text string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.warnings {
		if w == text {
			return true
		}
	}
	return false
}

// TestAdmissionWebhooks runs real webhooks (TLS servers in this process) against a real
// apiserver, one configuration at a time.
func TestAdmissionWebhooks(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	warnings := &warningRecorder{}
	config := rest.CopyConfig(srv.Config)
	config.WarningHandler = warnings
	cs := kubernetes.NewForConfigOrDie(config)
	ws := startWebhookServer(t, "webhook.webhook-service.svc")
	ctx := context.Background()

	t.Run("a validating webhook denies with its own status", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-deny")
		wt.createValidating(wt.validating("deny.webhooks.skiff.dev", ws.clientConfig("/deny-label"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create)))
		err := wt.deniedBy(wt.configMap("denied", "deny", "true"))
		var status apierrors.APIStatus
		if !errors.As(err, &status) || status.Status().Code != http.StatusForbidden || status.Status().Reason != metav1.StatusReasonForbidden {
			t.Fatalf("refusal %v: want the webhook's 403 Forbidden", err)
		}
		if want := `admission webhook "deny.webhooks.skiff.dev" denied the request: configmap carries deny=true`; err.Error() != want {
			t.Fatalf("refusal = %q, want %q", err.Error(), want)
		}
		if _, err := wt.createConfigMap(wt.configMap("allowed"), false); err != nil {
			t.Fatalf("unlabelled configmap: %v", err)
		}
		// What the webhook was sent for that create.
		var got *admissionv1.AdmissionRequest
		for _, r := range ws.received("/deny-label") {
			if r.Name == "allowed" && r.Namespace == wt.namespace {
				got = &r
			}
		}
		if got == nil {
			t.Fatal("the webhook never saw the create of allowed")
		}
		var options metav1.CreateOptions
		_ = json.Unmarshal(got.Options.Raw, &options)
		switch {
		case got.UID == "" || got.Operation != admissionv1.Create:
			t.Errorf("uid %q, operation %q", got.UID, got.Operation)
		case got.Kind != metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"} || got.Resource != metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}:
			t.Errorf("kind %v, resource %v", got.Kind, got.Resource)
		case got.RequestKind == nil || *got.RequestKind != got.Kind || got.RequestResource == nil || *got.RequestResource != got.Resource:
			t.Errorf("requestKind %v, requestResource %v", got.RequestKind, got.RequestResource)
		case got.UserInfo.Username != pki.Admin.CommonName || !contains(got.UserInfo.Groups, "system:masters"):
			t.Errorf("userInfo %+v, want the admin in system:masters", got.UserInfo)
		case got.DryRun == nil || *got.DryRun:
			t.Errorf("dryRun %v, want false", got.DryRun)
		case options.Kind != "CreateOptions" || options.APIVersion != "meta.k8s.io/v1":
			t.Errorf("options %s, want a meta.k8s.io/v1 CreateOptions", got.Options.Raw)
		case !strings.Contains(string(got.Object.Raw), `"kind":"ConfigMap"`) || string(got.OldObject.Raw) != "" && string(got.OldObject.Raw) != "null":
			t.Errorf("object %s, oldObject %s", got.Object.Raw, got.OldObject.Raw)
		}
	})

	t.Run("a connection to pods/attach is admitted as CONNECT", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-connect")
		wt.createValidating(wt.validating("connect.webhooks.skiff.dev", ws.clientConfig("/deny"),
			coreRule([]string{"pods/attach"}, admissionregistrationv1.Connect)))
		until(t, "the webhook refuses attach", func() error {
			err := cs.CoreV1().RESTClient().Post().Namespace(wt.namespace).Resource("pods").Name("to-be-attached").
				SubResource("attach").Param("container", "c").Param("stdin", "true").Do(ctx).Error()
			if err == nil || !strings.Contains(err.Error(), `admission webhook "connect.webhooks.skiff.dev" denied the request`) {
				return fmt.Errorf("attach: %v", err)
			}
			return nil
		})
		var got *admissionv1.AdmissionRequest
		for _, r := range ws.received("/deny") {
			if r.Name == "to-be-attached" {
				got = &r
			}
		}
		if got == nil || got.Operation != admissionv1.Connect || got.SubResource != "attach" || !strings.Contains(string(got.Object.Raw), `"kind":"PodAttachOptions"`) || !strings.Contains(string(got.Object.Raw), `"container":"c"`) {
			t.Errorf("the webhook was sent %+v, want CONNECT pods/attach with the PodAttachOptions", got)
		}
	})

	t.Run("a validating webhook sees the object a delete removes", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-delete")
		if _, err := wt.createConfigMap(wt.configMap("kept", "deny", "true"), false); err != nil {
			t.Fatal(err)
		}
		wt.createValidating(wt.validating("delete.webhooks.skiff.dev", ws.clientConfig("/deny-label"), coreRule([]string{"configmaps"}, admissionregistrationv1.Delete)))
		until(t, "the delete is refused", func() error {
			err := cs.CoreV1().ConfigMaps(wt.namespace).Delete(ctx, "kept", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) {
				return errors.New("delete not refused yet")
			}
			return nil
		})
		if _, err := cs.CoreV1().ConfigMaps(wt.namespace).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Fatalf("the configmap the webhook kept: %v", err)
		}
		if _, err := wt.createConfigMap(wt.configMap("gone"), false); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps(wt.namespace).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete of an unlabelled configmap: %v", err)
		}
		for _, r := range ws.received("/deny-label") {
			if r.Name == "gone" && r.Operation == admissionv1.Delete {
				var options metav1.DeleteOptions
				_ = json.Unmarshal(r.Options.Raw, &options)
				if options.Kind != "DeleteOptions" || !strings.Contains(string(r.OldObject.Raw), `"name":"gone"`) {
					t.Errorf("delete review: options %s, oldObject %s", r.Options.Raw, r.OldObject.Raw)
				}
			}
		}
	})

	t.Run("a mutating webhook's patch is stored", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-mutate")
		c := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wt.namespace},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "label.webhooks.skiff.dev", ClientConfig: ws.clientConfig("/label"),
				Rules:             []admissionregistrationv1.RuleWithOperations{coreRule([]string{"pods"}, admissionregistrationv1.Create)},
				NamespaceSelector: wt.selector(), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			}}}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, c.Name, metav1.DeleteOptions{})
		})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "x"}}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, AutomountServiceAccountToken: ptr.To(false)}}
		until(t, "the webhook labels a dry-run pod", func() error {
			out, err := cs.CoreV1().Pods(wt.namespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if out.Labels["webhook-added"] != "yes" {
				return errors.New("not labelled yet")
			}
			return nil
		})
		if _, err := cs.CoreV1().Pods(wt.namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stored, err := cs.CoreV1().Pods(wt.namespace).Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stored.Labels["webhook-added"] != "yes" || stored.Labels["app"] != "x" {
			t.Fatalf("stored labels %v, want app=x and the webhook's webhook-added=yes", stored.Labels)
		}
		if stored.Spec.ServiceAccountName != "default" {
			t.Fatalf("serviceAccountName %q: the in-tree mutating plugins still ran", stored.Spec.ServiceAccountName)
		}
	})

	t.Run("reinvocationPolicy IfNeeded calls a webhook again after a later patch", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-reinvoke")
		hook := func(name, path string, policy admissionregistrationv1.ReinvocationPolicyType) *admissionregistrationv1.MutatingWebhookConfiguration {
			return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wt.namespace + "-" + name},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name: name + ".webhooks.skiff.dev", ClientConfig: ws.clientConfig(path), ReinvocationPolicy: ptr.To(policy),
					Rules:             []admissionregistrationv1.RuleWithOperations{coreRule([]string{"configmaps"}, admissionregistrationv1.Create)},
					NamespaceSelector: wt.selector(), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
				}}}
		}
		// Configurations run in name order: a (which only looks) before b (which patches).
		for _, c := range []*admissionregistrationv1.MutatingWebhookConfiguration{
			hook("a", "/allow", admissionregistrationv1.IfNeededReinvocationPolicy), hook("b", "/label", admissionregistrationv1.NeverReinvocationPolicy),
		} {
			if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, c, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
			})
		}
		i := 0
		var name string
		until(t, "both webhooks are in effect", func() error {
			i++
			name = "cm-" + strings.Repeat("x", i)
			out, err := wt.createConfigMap(wt.configMap(name), true)
			if err != nil {
				return err
			}
			if out.Labels["webhook-added"] != "yes" {
				return errors.New("not patched yet")
			}
			for _, r := range ws.received("/allow") {
				if r.Name == name {
					return nil
				}
			}
			return errors.New("a not called yet")
		})
		var seen []string
		for _, r := range ws.received("/allow") {
			if r.Name == name {
				var obj metav1.PartialObjectMetadata
				_ = json.Unmarshal(r.Object.Raw, &obj)
				seen = append(seen, obj.Labels["webhook-added"])
			}
		}
		if len(seen) != 2 || seen[0] != "" || seen[1] != "yes" {
			t.Fatalf("webhook a saw webhook-added = %q, want it called twice: before b's patch and after", seen)
		}
		calls := 0
		for _, r := range ws.received("/label") {
			if r.Name == name {
				calls++
			}
		}
		if calls != 1 {
			t.Fatalf("webhook b (reinvocationPolicy Never) was called %d times, want 1", calls)
		}
	})

	t.Run("matchPolicy Equivalent matches the same objects served by another group", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-equivalent")
		eventsRule := admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"events.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"events"}}}
		exact := wt.validating("exact.webhooks.skiff.dev", ws.clientConfig("/deny"), eventsRule)
		exact.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
		wt.createValidating(wt.validating("equivalent.webhooks.skiff.dev", ws.clientConfig("/deny-label"), eventsRule), exact)
		event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Labels: map[string]string{"deny": "true"}},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: wt.namespace, Name: "p"}, Reason: "Test", Message: "m", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "test"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
		var err error
		until(t, "a core/v1 event is refused", func() error {
			_, err = cs.CoreV1().Events(wt.namespace).Create(ctx, event.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return errors.New("still admitted")
			}
			return nil
		})
		if want := `admission webhook "equivalent.webhooks.skiff.dev" denied the request: event carries deny=true`; err.Error() != want {
			t.Fatalf("refusal = %v, want %q (the Exact webhook is not called)", err, want)
		}
		var got *admissionv1.AdmissionRequest
		for _, r := range ws.received("/deny-label") {
			if r.Namespace == wt.namespace {
				got = &r
			}
		}
		if got == nil || got.Kind != (metav1.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "Event"}) ||
			*got.RequestKind != (metav1.GroupVersionKind{Version: "v1", Kind: "Event"}) || got.Resource.Group != "events.k8s.io" ||
			!strings.Contains(string(got.Object.Raw), `"note":"m"`) {
			t.Fatalf("review %+v: want an events.k8s.io/v1 Event (note m) for a v1 Event request", got)
		}
	})

	t.Run("custom resources are sent to webhooks and patched", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-custom")
		createEstablishedCRD(ctx, t, srv.Config, widgetsCRD())
		widgetsRule := admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wt.namespace},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "label.webhooks.skiff.dev", ClientConfig: ws.clientConfig("/label"), Rules: []admissionregistrationv1.RuleWithOperations{widgetsRule},
				NamespaceSelector: wt.selector(), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			}}}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), m.Name, metav1.DeleteOptions{})
		})
		wt.createValidating(wt.validating("deny.webhooks.skiff.dev", ws.clientConfig("/deny-label"), widgetsRule))
		widgets := dynamic.NewForConfigOrDie(srv.Config).Resource(widgetsGVR).Namespace(wt.namespace)
		until(t, "a labelled widget is refused", func() error {
			w := widget("denied", "blue", nil)
			w.SetLabels(map[string]string{"deny": "true"})
			_, err := widgets.Create(ctx, w, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return errors.New("still admitted")
			}
			if want := `admission webhook "deny.webhooks.skiff.dev" denied the request: widget carries deny=true`; err.Error() != want {
				return fmt.Errorf("refusal %q, want %q", err, want)
			}
			return nil
		})
		until(t, "a widget is patched", func() error {
			_ = widgets.Delete(ctx, "patched", metav1.DeleteOptions{})
			if _, err := widgets.Create(ctx, widget("patched", "blue", nil), metav1.CreateOptions{}); err != nil {
				return err
			}
			stored, err := widgets.Get(ctx, "patched", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if stored.GetLabels()["webhook-added"] != "yes" {
				return fmt.Errorf("stored labels %v", stored.GetLabels())
			}
			if size, _, _ := unstructuredInt(stored.Object, "spec", "size"); size != 3 {
				return fmt.Errorf("spec.size %d, want the schema's default 3", size)
			}
			return nil
		})
	})

	t.Run("namespaceSelector and objectSelector exclude", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-selected")
		other := newWebhookTest(t, cs, "webhook-not-selected")
		h := wt.validating("selectors.webhooks.skiff.dev", ws.clientConfig("/deny"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
		wt.createValidating(h)
		err := wt.deniedBy(wt.configMap("denied"))
		if want := `admission webhook "selectors.webhooks.skiff.dev" denied the request without explanation`; err.Error() != want || !apierrors.IsBadRequest(err) {
			t.Fatalf("refusal = %v, want a 400 %q", err, want)
		}
		if _, err := other.createConfigMap(other.configMap("other-namespace"), false); err != nil {
			t.Fatalf("a namespace the namespaceSelector does not select: %v", err)
		}
		if _, err := wt.createConfigMap(wt.configMap("skipped", "skip", "yes"), false); err != nil {
			t.Fatalf("an object the objectSelector does not select: %v", err)
		}
	})

	t.Run("matchConditions exclude", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-conditions")
		h := wt.validating("conditions.webhooks.skiff.dev", ws.clientConfig("/deny"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.MatchConditions = []admissionregistrationv1.MatchCondition{
			{Name: "not-allowed-by-name", Expression: "object.metadata.name != 'allowed'"},
			{Name: "requester-may-create", Expression: "authorizer.group('').resource('configmaps').namespace(object.metadata.namespace).check('create').allowed()"},
			{Name: "as-admin", Expression: "'system:masters' in request.userInfo.groups"},
		}
		wt.createValidating(h)
		wt.deniedBy(wt.configMap("denied"))
		if _, err := wt.createConfigMap(wt.configMap("allowed"), false); err != nil {
			t.Fatalf("an object a matchCondition excludes: %v", err)
		}
	})

	t.Run("failurePolicy Fail refuses when the webhook cannot be reached, Ignore admits", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-unreachable")
		unreachable := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/"), CABundle: ws.caPEM}
		wt.createValidating(wt.validating("unreachable.webhooks.skiff.dev", unreachable, coreRule([]string{"configmaps"}, admissionregistrationv1.Create)))
		err := wt.deniedBy(wt.configMap("any"))
		prefix := `Internal error occurred: failed calling webhook "unreachable.webhooks.skiff.dev": failed to call webhook: Post "https://127.0.0.1:1/?timeout=10s": `
		if !apierrors.IsInternalError(err) || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("refusal = %v, want a 500 %q...connection refused", err, prefix)
		}

		ignored := newWebhookTest(t, cs, "webhook-ignored")
		h := ignored.validating("unreachable.webhooks.skiff.dev", unreachable, coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		// The second webhook shows when the configuration is in effect.
		ignored.createValidating(h, ignored.validating("deny.webhooks.skiff.dev", ws.clientConfig("/deny-label"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create)))
		ignored.deniedBy(ignored.configMap("labelled", "deny", "true"))
		if _, err := ignored.createConfigMap(ignored.configMap("admitted"), false); err != nil {
			t.Fatalf("failurePolicy Ignore: %v", err)
		}
	})

	t.Run("timeoutSeconds bounds the call", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-timeout")
		h := wt.validating("slow.webhooks.skiff.dev", ws.clientConfig("/slow"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.TimeoutSeconds = ptr.To[int32](1)
		wt.createValidating(h)
		wt.deniedBy(wt.configMap("warmup"))
		start := time.Now()
		_, err := wt.createConfigMap(wt.configMap("slow"), false)
		took := time.Since(start)
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "slow.webhooks.skiff.dev": failed to call webhook: Post "`+ws.URL+`/slow?timeout=1s": `) {
			t.Fatalf("refusal = %v, want a 500 naming the webhook's URL with ?timeout=1s", err)
		}
		if took < time.Second || took > 2500*time.Millisecond {
			t.Fatalf("the refusal took %v, want the webhook's 1 s timeout (it answers after 3 s)", took)
		}
	})

	t.Run("a dry run is refused by a webhook with side effects", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-side-effects")
		// v1 refuses sideEffects Some on create; a configuration stored by an older
		// apiserver may still have it, so it is written to etcd directly.
		h := wt.validating("some.webhooks.skiff.dev", ws.clientConfig("/deny-label"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		h.FailurePolicy, h.MatchPolicy = ptr.To(admissionregistrationv1.Fail), ptr.To(admissionregistrationv1.Equivalent)
		h.ObjectSelector, h.TimeoutSeconds = &metav1.LabelSelector{}, ptr.To[int32](10)
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: metav1.ObjectMeta{Name: wt.namespace, UID: types.UID("side-effects-uid"), Generation: 1, CreationTimestamp: metav1.Now()},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{h},
		}
		putInEtcd(t, srv, "/registry/validatingwebhookconfigurations/"+c.Name, c)
		t.Cleanup(func() {
			_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
		until(t, "the stored configuration takes effect", func() error {
			_, err := wt.createConfigMap(wt.configMap("labelled", "deny", "true"), false)
			if !apierrors.IsForbidden(err) {
				return errors.New("not refused yet")
			}
			return nil
		})
		_, err := wt.createConfigMap(wt.configMap("dry"), true)
		if want := `admission webhook "some.webhooks.skiff.dev" does not support dry run`; !apierrors.IsBadRequest(err) || err.Error() != want {
			t.Fatalf("dry run: %v, want a 400 %q", err, want)
		}
		if _, err := wt.createConfigMap(wt.configMap("wet"), false); err != nil {
			t.Fatalf("the same create, not dry: %v", err)
		}
	})

	t.Run("a webhook's warnings reach the client", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-warn")
		wt.createValidating(wt.validating("warn.webhooks.skiff.dev", ws.clientConfig("/warn"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create)))
		i := 0
		until(t, "the warning arrives", func() error {
			i++
			if _, err := wt.createConfigMap(wt.configMap("cm-"+strings.Repeat("x", i)), true); err != nil {
				return err
			}
			if !warnings.has("configmaps are watched by the warn webhook") {
				return errors.New("no warning yet")
			}
			return nil
		})
	})

	t.Run("a service reference reaches a ready endpoint", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-service")
		port := int32(ws.Listener.Addr().(*net.TCPAddr).Port)
		if _, err := cs.CoreV1().Services(wt.namespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "webhook"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 8443, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.DiscoveryV1().EndpointSlices(wt.namespace).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "webhook-1", Labels: map[string]string{discoveryv1.LabelServiceName: "webhook"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
				{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: &port, Protocol: ptr.To(corev1.ProtocolTCP)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cc := admissionregistrationv1.WebhookClientConfig{CABundle: ws.caPEM, Service: &admissionregistrationv1.ServiceReference{
			Namespace: wt.namespace, Name: "webhook", Port: ptr.To[int32](8443), Path: ptr.To("/deny-label")}}
		wt.createValidating(wt.validating("service.webhooks.skiff.dev", cc, coreRule([]string{"configmaps"}, admissionregistrationv1.Create)))
		err := wt.deniedBy(wt.configMap("denied", "deny", "true"))
		if !strings.HasPrefix(err.Error(), `admission webhook "service.webhooks.skiff.dev" denied the request`) {
			t.Fatalf("refusal = %v, want the webhook's through its Service", err)
		}
	})

	t.Run("invalid configurations are 422", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-invalid")
		h := wt.validating("webhook", ws.clientConfig("/allow"), coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		h.TimeoutSeconds = ptr.To[int32](31)
		h.ClientConfig.URL = ptr.To("http://127.0.0.1/")
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wt.namespace}, Webhooks: []admissionregistrationv1.ValidatingWebhook{h}}
		_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, c, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create: %v, want 422 Invalid", err)
		}
		for _, want := range []string{
			`ValidatingWebhookConfiguration.admissionregistration.k8s.io "webhook-invalid" is invalid: [`,
			`webhooks[0].name: Invalid value: "webhook": should be a domain with at least three segments separated by dots`,
			`webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds`,
			`webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v\nlacks %q", err, want)
			}
		}
		if causes := err.(apierrors.APIStatus).Status().Details.Causes; len(causes) != 3 {
			t.Errorf("causes %v, want 3", causes)
		}
	})

	t.Run("webhook configurations are never sent to webhooks", func(t *testing.T) {
		wt := newWebhookTest(t, cs, "webhook-exempt")
		admissionConfigs := admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"admissionregistration.k8s.io"}, APIVersions: []string{"*"},
				Resources: []string{"*"}}}
		denyAll := wt.validating("deny-all.webhooks.skiff.dev", ws.clientConfig("/deny"), admissionConfigs)
		// Configmaps of the test's namespace too, to see when it is in effect.
		denyAll.Rules = append(denyAll.Rules, coreRule([]string{"configmaps"}, admissionregistrationv1.Create))
		wt.createValidating(denyAll)
		wt.deniedBy(wt.configMap("denied"))
		seen := len(ws.received("/deny"))
		m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "webhook-exempt-other"}}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create a configuration under a deny-all webhook: %v", err)
		}
		if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete it: %v", err)
		}
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, wt.namespace, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete the deny-all configuration itself: %v", err)
		}
		if n := len(ws.received("/deny")); n != seen {
			t.Fatalf("the webhook was sent %d reviews of webhook configurations", n-seen)
		}
	})

	t.Run("only cluster-admin writes webhook configurations", func(t *testing.T) {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "webhook-test-admin"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "webhook-test-user"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "webhook-test-admin", metav1.DeleteOptions{})
		})
		admin := kubernetes.NewForConfigOrDie(srv.ClientConfig("webhook-test-user"))
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "by-admin"}}
		until(t, "the binding is in force", func() error {
			_, err := admin.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		})
		_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, c, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("create by a user bound to admin: %v, want 403", err)
		}
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list by a user bound to admin: %v, want 403", err)
		}
	})
}

func contains(items []string, s string) bool {
	for _, i := range items {
		if i == s {
			return true
		}
	}
	return false
}

// putInEtcd stores obj at key as the apiserver would (protobuf), bypassing it.
func putInEtcd(t *testing.T, srv *controlplanetest.Server, key string, obj runtime.Object) {
	t.Helper()
	data, err := runtime.Encode(scheme.StorageCodec, obj)
	if err != nil {
		t.Fatal(err)
	}
	client, err := srv.Etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Put(context.Background(), key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// unstructuredInt is the integer at fields of obj.
func unstructuredInt(obj map[string]interface{}, fields ...string) (int64, bool, error) {
	return unstructured.NestedInt64(obj, fields...)
}
