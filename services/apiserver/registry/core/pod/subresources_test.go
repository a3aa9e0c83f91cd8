package pod_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry/core/pod"
)

// TestProxyRESTSpeaksForTheCaller: what reaches exec-proxy names the
// authenticated caller in the front-proxy headers, whatever identity headers
// the client sent, on the pod's subresource URL with the request's query.
func TestProxyRESTSpeaksForTheCaller(t *testing.T) {
	type seen struct {
		path, query string
		user        string
		groups      []string
		auth        string
	}
	got := make(chan seen, 1)
	// Stands in for exec-proxy: a real TLS server that records what arrives.
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get(pod.RemoteUserHeader), r.Header.Values(pod.RemoteGroupHeader), r.Header.Get("Authorization")}
		_, _ = w.Write([]byte("log line\n"))
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	pool := backend.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	subs := pod.NewSubresources(&pod.ExecProxy{URL: u, TLS: &tls.Config{RootCAs: pool}})

	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice", Groups: []string{"devs", "system:authenticated"}})
	h, err := subs["log"].Connect(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods/web/log?container=c&follow=true", nil).WithContext(ctx)
	req.Header.Set(pod.RemoteUserHeader, "admin")
	req.Header.Add(pod.RemoteGroupHeader, "system:masters")
	req.Header.Set("Authorization", "Bearer secret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	s := <-got
	if s.user != "alice" || !slices.Equal(s.groups, []string{"devs", "system:authenticated"}) || s.auth != "" {
		t.Errorf("exec-proxy saw user %q groups %q authorization %q, want alice, [devs system:authenticated] and none", s.user, s.groups, s.auth)
	}
	if s.path != "/api/v1/namespaces/default/pods/web/log" || s.query != "container=c&follow=true" {
		t.Errorf("exec-proxy saw %s?%s", s.path, s.query)
	}
	if rec.Code != http.StatusOK || rec.Body.String() != "log line\n" {
		t.Errorf("answer %d %q", rec.Code, rec.Body.String())
	}
}

func TestProxyRESTWithoutExecProxyIs503(t *testing.T) {
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	_, err := pod.NewSubresources(nil)["exec"].Connect(ctx, "default", "web")
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("err = %v, want 503 ServiceUnavailable", err)
	}
}
