package endpoints

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// TestMaxInFlightRejectsBeyondTheLimitAndExemptsOnlyMasters holds one mutating request
// from a plain user in flight with a limit of one, then sends the next requests while it
// is held: as kube's WithMaxInFlightLimit, only system:masters is exempt.
func TestMaxInFlightRejectsBeyondTheLimitAndExemptsOnlyMasters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMaxInFlight(1, 1, reg)
	entered, release := make(chan struct{}), make(chan struct{})
	h := m.filter(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") == "true" {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	send := func(method, url string, u user.Info) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, url, nil)
		r = r.WithContext(genericapirequest.WithUser(r.Context(), u))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}

	held := make(chan *httptest.ResponseRecorder)
	go func() { held <- send("POST", "/api/v1/namespaces/default/configmaps?hold=true", alice) }()
	<-entered
	if got := testutil.ToFloat64(m.current.WithLabelValues("mutating")); got != 1 {
		t.Errorf("apiserver_current_inflight_requests{request_kind=mutating} = %v, want 1", got)
	}

	tests := []struct {
		name, method, url string
		user              user.Info
		wantCode          int
	}{
		{"a plain user's next mutating request is refused", "POST", "/api/v1/namespaces/default/configmaps", alice, http.StatusTooManyRequests},
		{"a plain user's delete counts as mutating", "DELETE", "/api/v1/namespaces/default/configmaps/a", alice, http.StatusTooManyRequests},
		{"a read-only request has its own semaphore", "GET", "/api/v1/namespaces/default/configmaps", alice, http.StatusOK},
		{"a node renewing its Lease is counted as anyone", "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a",
			&user.DefaultInfo{Name: "system:node:node-a", Groups: []string{user.NodesGroup, user.AllAuthenticated}}, http.StatusTooManyRequests},
		{"the scheduler is counted as anyone", "POST", "/api/v1/namespaces/default/pods/p/binding", &user.DefaultInfo{Name: user.KubeScheduler}, http.StatusTooManyRequests},
		{"system:masters gets through", "POST", "/api/v1/namespaces", &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, http.StatusOK},
		{"exec is long-running and not counted", "POST", "/api/v1/namespaces/default/pods/p/exec", alice, http.StatusOK},
		{"a configmap named exec is counted", "POST", "/api/v1/namespaces/default/configmaps/exec", alice, http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := send(tt.method, tt.url, tt.user)
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != http.StatusTooManyRequests {
				return
			}
			if got := rec.Header().Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			var status metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
				t.Fatal(err)
			}
			if status.Kind != "Status" || status.Reason != metav1.StatusReasonTooManyRequests || status.Code != 429 ||
				status.Message != "Too many requests, please try again later." {
				t.Errorf("status %+v, want 429 TooManyRequests", status)
			}
		})
	}

	close(release)
	if rec := <-held; rec.Code != http.StatusOK {
		t.Errorf("held request: code %d", rec.Code)
	}
	if rec := send("POST", "/api/v1/namespaces/default/configmaps", alice); rec.Code != http.StatusOK {
		t.Errorf("after the held request finished: code %d, want 200", rec.Code)
	}
	if got := testutil.ToFloat64(m.current.WithLabelValues("mutating")); got != 0 {
		t.Errorf("apiserver_current_inflight_requests{request_kind=mutating} = %v after all finished, want 0", got)
	}
}

func TestIsLongRunning(t *testing.T) {
	tests := []struct {
		method, url string
		want        bool
	}{
		{"GET", "/api/v1/namespaces/default/pods?watch=true", true},
		{"GET", "/api/v1/watch/namespaces/default/pods", true},
		{"GET", "/apis/apps/v1/watch/deployments", true},
		{"GET", "/api/v1/namespaces/default/pods/p/log", true},
		{"POST", "/api/v1/namespaces/default/pods/p/portforward", true},
		{"GET", "/api/v1/nodes/n/proxy", true},
		{"GET", "/api/v1/namespaces/default/pods", false},
		{"GET", "/api/v1/namespaces/default/configmaps/log", false},
		{"GET", "/api/v1/namespaces/default/pods/p/status", false},
		{"GET", "/openapi/v3", false},
	}
	for _, tt := range tests {
		if got := isLongRunning(httptest.NewRequest(tt.method, tt.url, nil)); got != tt.want {
			t.Errorf("isLongRunning(%s %s) = %v, want %v", tt.method, tt.url, got, tt.want)
		}
	}
}

// TestTakeSeatIsTheFiltersLimit: the event sink takes its seats from the same limit as
// requests, and system:masters takes none.
func TestTakeSeatIsTheFiltersLimit(t *testing.T) {
	m := NewMaxInFlight(1, 1, prometheus.NewRegistry())
	proxy := &user.DefaultInfo{Name: "system:kube-proxy", Groups: []string{user.AllAuthenticated}}
	createEvent := &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "events", Namespace: "default"}
	release, ok := m.TakeSeat(proxy, createEvent)
	if !ok {
		t.Fatal("first seat refused")
	}
	if got := testutil.ToFloat64(m.current.WithLabelValues("mutating")); got != 1 {
		t.Errorf("mutating in flight = %v, want 1", got)
	}
	if _, ok := m.TakeSeat(proxy, createEvent); ok {
		t.Error("a second mutating seat beyond the limit was given")
	}
	h := m.filter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	r := httptest.NewRequest("POST", "/api/v1/namespaces/default/events", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r.WithContext(genericapirequest.WithUser(r.Context(), proxy)))
	if rec.Code != http.StatusTooManyRequests {
		t.Errorf("a POST while the event holds the seat: %d, want 429", rec.Code)
	}
	if _, ok := m.TakeSeat(proxy, &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "events"}); !ok {
		t.Error("a read-only seat was refused: it has its own limit")
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	if _, ok := m.TakeSeat(admin, createEvent); !ok {
		t.Error("system:masters was refused a seat: it is exempt")
	}
	release()
	if got := testutil.ToFloat64(m.current.WithLabelValues("mutating")); got != 0 {
		t.Errorf("mutating in flight after release = %v, want 0 (exempt seats are not counted)", got)
	}
	if _, ok := m.TakeSeat(proxy, createEvent); !ok {
		t.Error("the seat was not given back")
	}
}
