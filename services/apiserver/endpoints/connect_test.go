package endpoints

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/apiserver/openapi"
	"skiff.dev/services/apiserver/registry/core/pod"
)

// headerUser authenticates the user named in X-Test-User: the test's own
// credential scheme.
type headerUser struct{}

func (headerUser) AuthenticateRequest(r *http.Request) (user.Info, bool, error) {
	name := r.Header.Get("X-Test-User")
	return &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}, name != "", nil
}

// verbsOn allows each user the listed verbs on pods/exec, nothing else.
type verbsOn map[string][]string

func (v verbsOn) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() == "pods" && a.GetSubresource() == "exec" && slices.Contains(v[a.GetUser().GetName()], a.GetVerb()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionDeny, "", nil
}

type podStorage struct{}

func (podStorage) New() runtime.Object { return &corev1.Pod{} }

// TestConnectAuthorizesTheVerbKubeUses: POST (SPDY) is create on pods/exec; a
// WebSocket GET needs get and, as kube-apiserver requires since 1.31
// (AuthorizePodWebsocketUpgradeCreatePermission), create as well.
func TestConnectAuthorizesTheVerbKubeUses(t *testing.T) {
	subs := pod.NewSubresources(nil) // no exec-proxy: an authorized request gets 503
	h := NewHandler(Config{
		Core: &APIGroupVersion{GroupVersion: corev1.SchemeGroupVersion, Resources: []Resource{{
			Name: "pods", Kind: "Pod", Namespaced: true, Storage: podStorage{},
			Subresources: map[string]Subresource{"exec": {Kind: "PodExecOptions", Storage: subs["exec"]}},
		}}},
		Authenticator:      headerUser{},
		Authorizer:         verbsOn{"reader": {"get"}, "creator": {"create"}, "both": {"get", "create"}},
		OpenAPIDefinitions: openapi.GetOpenAPIDefinitions,
	})
	tests := []struct {
		user, method string
		websocket    bool
		code         int
	}{
		{"reader", http.MethodPost, false, http.StatusForbidden},
		{"creator", http.MethodPost, false, http.StatusServiceUnavailable},
		{"reader", http.MethodGet, true, http.StatusForbidden},
		{"creator", http.MethodGet, true, http.StatusForbidden},
		{"both", http.MethodGet, true, http.StatusServiceUnavailable},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(tc.method, "/api/v1/namespaces/default/pods/web/exec?command=true&stdout=true", nil)
		req.Header.Set("X-Test-User", tc.user)
		if tc.websocket {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var st metav1.Status
		_ = json.Unmarshal(rec.Body.Bytes(), &st)
		if rec.Code != tc.code || int(st.Code) != tc.code {
			t.Errorf("%s %s (websocket %v): %d %s, want %d", tc.user, tc.method, tc.websocket, rec.Code, rec.Body, tc.code)
		}
	}
}
