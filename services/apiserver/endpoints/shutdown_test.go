package endpoints

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWithRetryAfterRefusesRequestsOnceShuttingDown: before the shutdown every request is
// served; after it, every one but the health probes and metrics gets 429 TooManyRequests
// as a metav1.Status, with Retry-After (client-go retries on it) and Connection: close.
func TestWithRetryAfterRefusesRequestsOnceShuttingDown(t *testing.T) {
	served := 0
	shuttingDown := make(chan struct{})
	h := WithRetryAfter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served++
		w.WriteHeader(http.StatusOK)
	}), shuttingDown)
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}

	if w := get("/api/v1/pods?watch=true"); w.Code != http.StatusOK || served != 1 {
		t.Fatalf("before the shutdown: %d, served %d; want 200, served", w.Code, served)
	}
	close(shuttingDown)
	for _, path := range []string{"/api/v1/pods?watch=true", "/apis/apps/v1/namespaces/default/deployments", "/version"} {
		w := get(path)
		var status metav1.Status
		if err := json.Unmarshal(w.Body.Bytes(), &status); err != nil {
			t.Fatalf("%s: body is not a Status: %v: %s", path, err, w.Body)
		}
		if w.Code != http.StatusTooManyRequests || status.Reason != metav1.StatusReasonTooManyRequests ||
			w.Header().Get("Retry-After") != "1" || w.Header().Get("Connection") != "close" {
			t.Errorf("%s while shutting down: %d %s, Retry-After %q, Connection %q; want 429 TooManyRequests, Retry-After 1, Connection close",
				path, w.Code, status.Reason, w.Header().Get("Retry-After"), w.Header().Get("Connection"))
		}
	}
	if served != 1 {
		t.Errorf("%d requests reached the handler while shutting down, want none", served-1)
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
		if w := get(path); w.Code != http.StatusOK {
			t.Errorf("%s while shutting down: %d, want it served", path, w.Code)
		}
	}
}
