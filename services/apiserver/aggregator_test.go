package apiserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// The extension API server of these tests serves wardle.example.com/v1alpha1 flunders,
// as kube's sample-apiserver does, behind the Service wardle/api.
const (
	wardleGroup     = "wardle.example.com"
	wardleVersion   = "v1alpha1"
	wardleNamespace = "wardle"
	wardleService   = "api"
)

var flunders = schema.GroupVersionResource{Group: wardleGroup, Version: wardleVersion, Resource: "flunders"}

// extensionServer is a real extension API server over TLS: its serving certificate is
// for api.wardle.svc, from a CA of its own (the APIService's caBundle), and it accepts
// only client certificates of the request-header CA with an allowed name, as an
// extension server's request-header authentication does. It records every request.
type extensionServer struct {
	*httptest.Server
	caPEM        []byte
	allowedNames []string
	broken       atomic.Bool // answer every request 500

	mu       sync.Mutex
	requests []seenRequest
}

// seenRequest is what the extension server saw of one request.
type seenRequest struct {
	path, query, clientCN, user, traceparent string
	groups                                   []string
	extra                                    http.Header // X-Remote-Extra-*
	authorization                            string
}

// startExtensionServer serves with request-header authentication trusting clientCAs'
// certificates named allowedNames.
func startExtensionServer(t *testing.T, clientCAs *x509.CertPool, allowedNames []string) *extensionServer {
	t.Helper()
	ca, err := pki.NewCA("wardle-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServing("wardle", []string{wardleService + "." + wardleNamespace + ".svc"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	es := &extensionServer{caPEM: ca.CertPEM, allowedNames: allowedNames}
	es.Server = httptest.NewUnstartedServer(http.HandlerFunc(es.serve))
	es.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	es.StartTLS()
	t.Cleanup(es.Close)
	return es
}

func (es *extensionServer) serve(w http.ResponseWriter, r *http.Request) {
	cn := r.TLS.PeerCertificates[0].Subject.CommonName
	if !slices.Contains(es.allowedNames, cn) {
		http.Error(w, "not the front proxy", http.StatusUnauthorized)
		return
	}
	seen := seenRequest{path: r.URL.Path, query: r.URL.RawQuery, clientCN: cn, user: r.Header.Get("X-Remote-User"),
		groups: r.Header.Values("X-Remote-Group"), extra: http.Header{}, traceparent: r.Header.Get("traceparent"),
		authorization: r.Header.Get("Authorization")}
	for k, v := range r.Header {
		if strings.HasPrefix(k, "X-Remote-Extra-") {
			seen.extra[k] = v
		}
	}
	es.mu.Lock()
	es.requests = append(es.requests, seen)
	es.mu.Unlock()
	if es.broken.Load() {
		http.Error(w, "broken", http.StatusInternalServerError)
		return
	}
	write := func(v interface{}) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	flunder := func(name string) map[string]interface{} {
		return map[string]interface{}{"apiVersion": wardleGroup + "/" + wardleVersion, "kind": "Flunder",
			"metadata": map[string]interface{}{"name": name, "namespace": wardleNamespace, "resourceVersion": "7"},
			"spec":     map[string]interface{}{"servedTo": seen.user}}
	}
	gv := "/apis/" + wardleGroup + "/" + wardleVersion
	switch {
	case r.URL.Path == "/openapi/v3":
		write(map[string]interface{}{"paths": map[string]interface{}{
			"apis/" + wardleGroup + "/" + wardleVersion: map[string]string{"serverRelativeURL": "/openapi/v3" + gv + "?hash=ABC"}}})
	case r.URL.Path == "/openapi/v3"+gv:
		write(map[string]interface{}{"openapi": "3.0.0", "info": map[string]string{"title": "wardle", "version": "v1alpha1"},
			"paths": map[string]interface{}{}, "components": map[string]interface{}{"schemas": map[string]interface{}{
				"com.example.wardle.v1alpha1.Flunder": map[string]interface{}{"type": "object", "description": "A Flunder, served by an extension API server."}}}})
	case r.URL.Path == gv:
		write(&metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: wardleGroup + "/" + wardleVersion,
			APIResources: []metav1.APIResource{
				{Name: "flunders", SingularName: "flunder", Namespaced: true, Kind: "Flunder", Verbs: metav1.Verbs{"get", "list", "watch"}, ShortNames: []string{"fl"}},
				{Name: "flunders/status", Namespaced: true, Kind: "Flunder", Verbs: metav1.Verbs{"get"}},
			}})
	case r.URL.Path == gv+"/namespaces/"+wardleNamespace+"/flunders" && r.URL.Query().Get("watch") == "true":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]interface{}{"type": "ADDED", "object": flunder("streamed")})
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the stream stays open: the event must arrive before it ends
	case r.URL.Path == gv+"/namespaces/"+wardleNamespace+"/flunders/one/echo" && r.Header.Get("Upgrade") == "echo":
		// An exec-like stream: switch protocols, then echo every line back.
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = rw.WriteString("echo: " + line)
			_ = rw.Flush()
		}
	case r.URL.Path == gv+"/namespaces/"+wardleNamespace+"/flunders":
		write(map[string]interface{}{"apiVersion": wardleGroup + "/" + wardleVersion, "kind": "FlunderList",
			"metadata": map[string]interface{}{"resourceVersion": "7"}, "items": []interface{}{flunder("one")}})
	default:
		http.NotFound(w, r)
	}
}

// seen returns the requests for path so far.
func (es *extensionServer) seen(path string) []seenRequest {
	es.mu.Lock()
	defer es.mu.Unlock()
	var out []seenRequest
	for _, r := range es.requests {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// last is the latest request for path; it fails the test when there is none.
func (es *extensionServer) last(t *testing.T, path string) seenRequest {
	t.Helper()
	seen := es.seen(path)
	if len(seen) == 0 {
		t.Fatalf("the extension server saw no request for %s", path)
	}
	return seen[len(seen)-1]
}

// availability is an APIService's Available condition, "" when it has none.
func availability(s *apiregistrationv1.APIService) (apiregistrationv1.ConditionStatus, string) {
	c := helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available)
	if c == nil {
		return "", ""
	}
	return c.Status, c.Reason
}

// waitAvailable waits until APIService name's Available condition is status with reason,
// and returns its message.
func waitAvailable(t *testing.T, ac aggregatorclient.Interface, name string, status apiregistrationv1.ConditionStatus, reason string) string {
	t.Helper()
	var msg string
	until(t, fmt.Sprintf("APIService %s Available=%s (%s)", name, status, reason), func() error {
		s, err := ac.ApiregistrationV1().APIServices().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got, why := availability(s)
		if got != status || why != reason {
			return fmt.Errorf("Available=%s (%s): %s", got, why, helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available))
		}
		msg = helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available).Message
		return nil
	})
	return msg
}

// rawGet GETs path from the apiserver with cfg's credentials and the given headers.
func rawGet(t *testing.T, cfg *rest.Config, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// extensionAuthentication reads, as an extension API server bound to kube's
// extension-apiserver-authentication-reader Role does at its start, the request-header
// CA and allowed names the apiserver publishes in
// kube-system/extension-apiserver-authentication, and checks the rest of it.
func extensionAuthentication(t *testing.T, srv *controlplanetest.Server) (*x509.CertPool, []string) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "wardle-auth-reader", Namespace: "kube-system"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "wardle-server"}}}
	if _, err := admin.RbacV1().RoleBindings("kube-system").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	server := kubernetes.NewForConfigOrDie(srv.ClientConfig("wardle-server"))
	var cm *corev1.ConfigMap
	until(t, "the extension server reads extension-apiserver-authentication", func() error {
		var err error
		cm, err = server.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		return err
	})
	frontProxyCA, _ := pki.FrontProxyCA.Files(srv.PKIDir)
	frontProxyPEM, err := os.ReadFile(frontProxyCA)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"client-ca-file":                     string(srv.CA.CertPEM),
		"requestheader-client-ca-file":       string(frontProxyPEM),
		"requestheader-allowed-names":        `["front-proxy-client"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	} {
		if got := cm.Data[key]; got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	// The Role lets it read that ConfigMap, nothing else.
	if _, err := server.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("another kube-system ConfigMap: %v, want 403", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["requestheader-client-ca-file"])) {
		t.Fatal("requestheader-client-ca-file holds no certificate")
	}
	var allowed []string
	if err := json.Unmarshal([]byte(cm.Data["requestheader-allowed-names"]), &allowed); err != nil {
		t.Fatal(err)
	}
	return pool, allowed
}

func TestAggregatedAPIs(t *testing.T) {
	srv := controlplanetest.StartServerWithoutControllers(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ac := aggregatorclient.NewForConfigOrDie(srv.Config)
	clientCAs, allowedNames := extensionAuthentication(t, srv)
	es := startExtensionServer(t, clientCAs, allowedNames)
	port := int32(es.Listener.Addr().(*net.TCPAddr).Port)
	listPath := "/apis/" + wardleGroup + "/" + wardleVersion + "/namespaces/" + wardleNamespace + "/flunders"
	apiServiceName := wardleVersion + "." + wardleGroup

	t.Run("local APIServices for the built-in group versions", func(t *testing.T) {
		for _, name := range []string{"v1.", "v1.apps", "v1.rbac.authorization.k8s.io", "v1.apiextensions.k8s.io"} {
			waitAvailable(t, ac, name, apiregistrationv1.ConditionTrue, "Local")
		}
		s, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1.apps", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.Service != nil || s.Spec.GroupPriorityMinimum != 17800 || s.Spec.VersionPriority != 15 ||
			s.Labels["kube-aggregator.kubernetes.io/automanaged"] != "onstart" {
			t.Errorf("v1.apps = %+v %v, want kube's local APIService", s.Spec, s.Labels)
		}
		if _, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1.apiregistration.k8s.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("v1.apiregistration.k8s.io: %v, want none, as in kube", err)
		}
		// kubectl get apiservices: NAME SERVICE AVAILABLE AGE.
		resp, body := rawGet(t, srv.Config, "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps",
			http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io"}})
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil || resp.StatusCode != http.StatusOK || len(table.Rows) != 1 {
			t.Fatalf("table: %d %s", resp.StatusCode, body)
		}
		if cells := table.Rows[0].Cells; len(cells) != 4 || cells[0] != "v1.apps" || cells[1] != "Local" || cells[2] != "True" {
			t.Errorf("row = %v, want v1.apps Local True <age>", cells)
		}
	})

	t.Run("local APIServices for custom resource group versions", func(t *testing.T) {
		crds := apiextensionsclient.NewForConfigOrDie(srv.Config).ApiextensionsV1().CustomResourceDefinitions()
		schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "gadgets.stable.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "stable.example.com", Scope: apiextensionsv1.ClusterScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
					{Name: "v1", Served: true, Storage: true, Schema: schema},
					{Name: "v2beta1", Served: false, Schema: schema},
				}},
		}
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAvailable(t, ac, "v1.stable.example.com", apiregistrationv1.ConditionTrue, "Local")
		s, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1.stable.example.com", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.GroupPriorityMinimum != 1000 || s.Spec.VersionPriority != 100 || s.Labels["kube-aggregator.kubernetes.io/automanaged"] != "true" {
			t.Errorf("v1.stable.example.com = %+v %v, want kube's CRD APIService", s.Spec, s.Labels)
		}
		if _, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v2beta1.stable.example.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("an unserved version's APIService: %v, want none", err)
		}
		// Deleted while its CRD serves it, it comes back.
		if err := ac.ApiregistrationV1().APIServices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "the APIService comes back", func() error {
			again, err := ac.ApiregistrationV1().APIServices().Get(ctx, s.Name, metav1.GetOptions{})
			if err == nil && again.UID == s.UID {
				return errors.New("not deleted yet")
			}
			return err
		})
		// The custom resources are served and listed as before.
		if resp, body := rawGet(t, srv.Config, "/apis/stable.example.com/v1/gadgets", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET gadgets: %d %s", resp.StatusCode, body)
		}
		if err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "the APIService goes with its CRD", func() error {
			_, err := ac.ApiregistrationV1().APIServices().Get(ctx, s.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	})

	// The Service and its EndpointSlice point at the extension server on 127.0.0.1.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardleNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: wardleService},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	if _, err := cs.CoreV1().Services(wardleNamespace).Create(ctx, service, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(ready bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "api-1", Labels: map[string]string{discoveryv1.LabelServiceName: wardleService}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: &port, Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(wardleNamespace).Create(ctx, slice(true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: apiServiceName},
		Spec: apiregistrationv1.APIServiceSpec{Group: wardleGroup, Version: wardleVersion, GroupPriorityMinimum: 2000, VersionPriority: 200,
			Service:  &apiregistrationv1.ServiceReference{Namespace: wardleNamespace, Name: wardleService},
			CABundle: es.caPEM},
	}
	created, err := ac.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Service.Port == nil || *created.Spec.Service.Port != 443 {
		t.Errorf("spec.service.port = %v, want the default 443", created.Spec.Service.Port)
	}

	t.Run("the APIService becomes available", func(t *testing.T) {
		if msg := waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionTrue, "Passed"); msg != "all checks passed" {
			t.Errorf("message %q", msg)
		}
		// The check GETs the group version as system:kube-aggregator in system:masters
		// (the discovery that follows asks as system:kube-aggregator alone, as kube's).
		checked := false
		for _, r := range es.seen("/apis/" + wardleGroup + "/" + wardleVersion) {
			checked = checked || (r.user == "system:kube-aggregator" && slices.Equal(r.groups, []string{"system:masters"}) && r.clientCN == "front-proxy-client")
		}
		if !checked {
			t.Errorf("no discovery check as system:kube-aggregator in system:masters: %+v", es.seen("/apis/"+wardleGroup+"/"+wardleVersion))
		}
	})

	t.Run("a request reaches the extension server as its caller", func(t *testing.T) {
		dyn := dynamic.NewForConfigOrDie(srv.Config)
		var list interface{ UnstructuredContent() map[string]interface{} }
		until(t, "the list is proxied", func() error {
			l, err := dyn.Resource(flunders).Namespace(wardleNamespace).List(ctx, metav1.ListOptions{})
			list = l
			return err
		})
		items, _ := list.UnstructuredContent()["items"].([]interface{})
		if len(items) != 1 {
			t.Fatalf("list = %v, want the extension server's one flunder", list.UnstructuredContent())
		}
		seen := es.last(t, listPath)
		if seen.clientCN != "front-proxy-client" || seen.user != pki.Admin.CommonName ||
			!slices.Contains(seen.groups, "system:masters") || !slices.Contains(seen.groups, "system:authenticated") {
			t.Errorf("the extension server saw %+v, want the admin's identity over the front-proxy certificate", seen)
		}
		// Identity headers a client sends are not trusted, nor forwarded; impersonation is.
		resp, body := rawGet(t, srv.Config, listPath, http.Header{
			"X-Remote-User": {"mallory"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Extra-Scopes": {"forged"},
			"Impersonate-User": {"alice"}, "Impersonate-Group": {"system:masters"},
		})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("impersonated GET: %d %s", resp.StatusCode, body)
		}
		seen = es.last(t, listPath)
		if seen.user != "alice" || !slices.Equal(seen.groups, []string{"system:masters", "system:authenticated"}) || len(seen.extra) != 0 || seen.authorization != "" {
			t.Errorf("the extension server saw %+v, want alice in system:masters, system:authenticated, no extra, no Authorization", seen)
		}
		// The hop is traced: the caller's trace goes on to the extension server.
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		if resp, body := rawGet(t, srv.Config, listPath, http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}}); resp.StatusCode != http.StatusOK {
			t.Fatalf("traced GET: %d %s", resp.StatusCode, body)
		}
		if tp := es.last(t, listPath).traceparent; !strings.HasPrefix(tp, "00-"+traceID+"-") {
			t.Errorf("traceparent at the extension server = %q, want trace %s", tp, traceID)
		}
	})

	t.Run("a watch streams", func(t *testing.T) {
		dyn := dynamic.NewForConfigOrDie(srv.Config)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := dyn.Resource(flunders).Namespace(wardleNamespace).Watch(wctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if m, ok := ev.Object.(interface{ GetName() string }); !ok || ev.Type != "ADDED" || m.GetName() != "streamed" {
				t.Errorf("event %s %#v, want ADDED streamed", ev.Type, ev.Object)
			}
		case <-wctx.Done():
			t.Fatal("no event through the proxy while the stream is open")
		}
	})

	t.Run("a server the caBundle does not verify is unavailable", func(t *testing.T) {
		other, err := pki.NewCA("not-wardle-ca")
		if err != nil {
			t.Fatal(err)
		}
		s := apiService.DeepCopy()
		s.Name, s.Spec.Version, s.Spec.CABundle = "v1beta1."+wardleGroup, "v1beta1", other.CertPEM
		if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ac.ApiregistrationV1().APIServices().Delete(ctx, s.Name, metav1.DeleteOptions{}) }()
		if msg := waitAvailable(t, ac, s.Name, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck"); !strings.Contains(msg, "certificate signed by unknown authority") {
			t.Errorf("message %q, want the TLS verification's failure", msg)
		}
		if resp, body := rawGet(t, srv.Config, "/apis/"+wardleGroup+"/v1beta1/namespaces/"+wardleNamespace+"/flunders", nil); resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET: %d %s, want 503", resp.StatusCode, body)
		}
	})

	t.Run("an upgraded stream goes through", func(t *testing.T) {
		path := listPath + "/one/echo"
		clientTLS, err := rest.TLSConfigFor(srv.Config)
		if err != nil {
			t.Fatal(err)
		}
		clientTLS.NextProtos = []string{"http/1.1"}
		conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), clientTLS)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: skiff\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Remote-User: mallory\r\n\r\n", path)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("upgrade: %d %s, want 101", resp.StatusCode, body)
		}
		fmt.Fprintf(conn, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
			t.Fatalf("read %q, %v; want the extension server's echo", line, err)
		}
		if seen := es.last(t, path); seen.user != pki.Admin.CommonName || !slices.Contains(seen.groups, "system:masters") || seen.clientCN != "front-proxy-client" {
			t.Errorf("the extension server saw %+v, want the admin over the front-proxy certificate", seen)
		}
	})

	t.Run("a caller the apiserver does not authorize is refused there", func(t *testing.T) {
		bob := srv.ClientConfig("bob")
		before := len(es.seen(listPath))
		resp, body := rawGet(t, bob, listPath, nil)
		want := `flunders.wardle.example.com is forbidden: User \"bob\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"wardle\"`
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), want) {
			t.Errorf("bob's GET: %d %s, want 403 %s", resp.StatusCode, body, want)
		}
		if len(es.seen(listPath)) != before {
			t.Error("a refused request reached the extension server")
		}
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "flunder-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{wardleGroup}, Resources: []string{"flunders"}, Verbs: []string{"list"}}}}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-reads-flunders"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "bob may list flunders", func() error {
			if resp, body := rawGet(t, bob, listPath, nil); resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
		if seen := es.last(t, listPath); seen.user != "bob" {
			t.Errorf("the extension server saw %q, want bob", seen.user)
		}
	})

	t.Run("OpenAPI v3 publishes the extension server's document", func(t *testing.T) {
		path := "/openapi/v3/apis/" + wardleGroup + "/" + wardleVersion
		until(t, "the document is in the index", func() error {
			resp, body := rawGet(t, srv.Config, "/openapi/v3", nil)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"serverRelativeURL":"`+path+`?hash=`) {
				return fmt.Errorf("/openapi/v3: %d %s", resp.StatusCode, body)
			}
			return nil
		})
		resp, body := rawGet(t, srv.Config, path, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "A Flunder, served by an extension API server.") {
			t.Errorf("%s: %d %s, want the extension server's document", path, resp.StatusCode, body)
		}
	})

	t.Run("discovery lists the group", func(t *testing.T) {
		dc := discovery.NewDiscoveryClientForConfigOrDie(srv.Config)
		groups, err := dc.ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		var found *metav1.APIGroup
		for i := range groups.Groups {
			if groups.Groups[i].Name == wardleGroup {
				found = &groups.Groups[i]
			}
		}
		if found == nil || found.PreferredVersion.Version != wardleVersion {
			t.Fatalf("groups %v lack %s/%s", groups.Groups, wardleGroup, wardleVersion)
		}
		resp, body := rawGet(t, srv.Config, "/apis/"+wardleGroup, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"kind":"APIGroup"`) || !strings.Contains(string(body), `"groupVersion":"wardle.example.com/v1alpha1"`) {
			t.Errorf("/apis/%s: %d %s", wardleGroup, resp.StatusCode, body)
		}
		// Aggregated discovery carries the resources the extension server listed.
		until(t, "aggregated discovery lists flunders", func() error {
			resp, body := rawGet(t, srv.Config, "/apis", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}})
			var list apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			for _, g := range list.Items {
				if g.Name != wardleGroup {
					continue
				}
				if len(g.Versions) != 1 || g.Versions[0].Version != wardleVersion || g.Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
					return fmt.Errorf("group %+v", g)
				}
				for _, r := range g.Versions[0].Resources {
					if r.Resource == "flunders" && r.Scope == apidiscoveryv2.ScopeNamespace && r.ResponseKind.Kind == "Flunder" &&
						len(r.Subresources) == 1 && r.Subresources[0].Subresource == "status" {
						return nil
					}
				}
				return fmt.Errorf("resources %+v", g.Versions[0].Resources)
			}
			return errors.New("no group " + wardleGroup)
		})
		// As kubectl api-resources reads it.
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range lists {
			if l.GroupVersion == wardleGroup+"/"+wardleVersion {
				for _, r := range l.APIResources {
					names = append(names, r.Name)
				}
			}
		}
		if !slices.Contains(names, "flunders") {
			t.Errorf("api-resources of %s/%s: %v, want flunders", wardleGroup, wardleVersion, names)
		}
	})

	// poke changes the APIService's labels, which has it checked again at once.
	poke := func(t *testing.T, value string) {
		t.Helper()
		// The availability controller writes status meanwhile: retry on conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := ac.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Labels = map[string]string{"poke": value}
			_, err = ac.ApiregistrationV1().APIServices().Update(ctx, s, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	unavailable := func(t *testing.T) {
		t.Helper()
		resp, body := rawGet(t, srv.Config, listPath, nil)
		if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "service unavailable\n" {
			t.Errorf("GET through an unavailable APIService: %d %q, want kube's 503 service unavailable", resp.StatusCode, body)
		}
	}

	t.Run("a broken server makes the APIService unavailable", func(t *testing.T) {
		es.broken.Store(true)
		poke(t, "broken")
		msg := waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck")
		if !strings.Contains(msg, "failing or missing response from https://127.0.0.1:") || !strings.HasSuffix(msg, ": 500") {
			t.Errorf("message %q", msg)
		}
		unavailable(t)
		// Discovery still lists it (kube does), as stale.
		resp, body := rawGet(t, srv.Config, "/apis", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"freshness":"Stale"`) {
			t.Errorf("aggregated discovery of a broken server: %d %s, want it Stale", resp.StatusCode, body)
		}
		es.broken.Store(false)
		poke(t, "mended")
		waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionTrue, "Passed")
	})

	t.Run("no ready endpoint, no endpoints, no Service", func(t *testing.T) {
		if _, err := cs.DiscoveryV1().EndpointSlices(wardleNamespace).Update(ctx, slice(false), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if msg := waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionFalse, "MissingEndpoints"); msg != `endpointslices for service/api in "wardle" have no addresses with port name "https"` {
			t.Errorf("message %q", msg)
		}
		unavailable(t)
		if err := cs.DiscoveryV1().EndpointSlices(wardleNamespace).Delete(ctx, "api-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionFalse, "EndpointsNotFound")
		if err := cs.CoreV1().Services(wardleNamespace).Delete(ctx, wardleService, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if msg := waitAvailable(t, ac, apiServiceName, apiregistrationv1.ConditionFalse, "ServiceNotFound"); msg != `service/api in "wardle" is not present` {
			t.Errorf("message %q", msg)
		}
		// kubectl get apiservices says why.
		resp, body := rawGet(t, srv.Config, "/apis/apiregistration.k8s.io/v1/apiservices/"+apiServiceName,
			http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"wardle/api","False (ServiceNotFound)"`) {
			t.Errorf("table: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("invalid APIServices are 422", func(t *testing.T) {
		bad := &apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: "bad.wardle.example.com"},
			Spec: apiregistrationv1.APIServiceSpec{Group: wardleGroup, Version: "v1", GroupPriorityMinimum: 0, VersionPriority: 1001,
				Service:               &apiregistrationv1.ServiceReference{Namespace: wardleNamespace, Name: wardleService, Port: ptr.To[int32](0)},
				CABundle:              es.caPEM,
				InsecureSkipTLSVerify: true},
		}
		_, err := ac.ApiregistrationV1().APIServices().Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create: %v, want 422 Invalid", err)
		}
		for _, want := range []string{
			`APIService.apiregistration.k8s.io "bad.wardle.example.com" is invalid: [`,
			`metadata.name: Invalid value: "bad.wardle.example.com": must be ` + "`spec.version+\".\"+spec.group`" + `: "v1.wardle.example.com"`,
			`spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000`,
			`spec.versionPriority: Invalid value: 1001: must be positive and less than 1000`,
			`spec.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive`,
			`spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v\nlacks %q", err, want)
			}
		}
		if causes := err.(apierrors.APIStatus).Status().Details.Causes; len(causes) != 5 {
			t.Errorf("causes %+v, want 5", causes)
		}
		local := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v2.wardle.example.com"},
			Spec: apiregistrationv1.APIServiceSpec{Group: wardleGroup, Version: "v2", GroupPriorityMinimum: 1, VersionPriority: 1, CABundle: es.caPEM}}
		_, err = ac.ApiregistrationV1().APIServices().Create(ctx, local, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.caBundle: Invalid value: ") || !strings.Contains(err.Error(), "local APIServices may not have a caBundle") {
			t.Errorf("local with a caBundle: %v, want 422 on spec.caBundle", err)
		}
	})

	t.Run("a deleted APIService is no longer served", func(t *testing.T) {
		if err := ac.ApiregistrationV1().APIServices().Delete(ctx, apiServiceName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, "the group leaves /apis", func() error {
			resp, body := rawGet(t, srv.Config, "/apis", nil)
			if resp.StatusCode != http.StatusOK || strings.Contains(string(body), wardleGroup) {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
		if resp, body := rawGet(t, srv.Config, listPath, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET after delete: %d %s, want 404", resp.StatusCode, body)
		}
	})
}
