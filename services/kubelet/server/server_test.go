package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// host is the kubelet side the server asks: a fixed set of pods, all healthy.
type host map[string]*v1.Pod

func (h host) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	p, ok := h[namespace+"/"+name]
	return p, ok
}

// GetPodStatus has nothing: the server falls back to the pod's API status.
func (h host) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

func (h host) Healthz() error { return nil }

func keyPair(t *testing.T, kp pki.KeyPair) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOnlyExecProxyAndMastersMayUseTheAPI serves the kubelet API over real TLS
// in front of a real (sim) CRI runtime and calls it with several identities.
func TestOnlyExecProxyAndMastersMayUseTheAPI(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	rt := sim.New()
	defer rt.Close()
	cri := socketharness.Start(t, rt, rt)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	srv, err := server.New(server.Config{Host: host{"default/p": pod}, Runtime: cri.Runtime})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.IssueServing("node-1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, lis, &tls.Config{Certificates: []tls.Certificate{keyPair(t, serving)}, ClientCAs: ca.CertPool()})
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	client := func(cn string, orgs ...string) *http.Client {
		cfg := &tls.Config{RootCAs: ca.CertPool()}
		if cn != "" {
			kp, err := ca.IssueClient(cn, orgs, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{keyPair(t, kp)}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	}
	base := "https://" + lis.Addr().String()
	tests := []struct {
		name   string
		client *http.Client
		path   string
		code   int
	}{
		{"healthz needs no certificate", client(""), "/healthz", http.StatusOK},
		{"no certificate is 401", client(""), "/containerLogs/default/p/c", http.StatusUnauthorized},
		{"a node is 403", client("system:node:node-2", "system:nodes"), "/containerLogs/default/p/c", http.StatusForbidden},
		{"exec-proxy passes: unknown pod is 404", client(server.ExecProxyUser), "/containerLogs/default/nope/c", http.StatusNotFound},
		{"masters pass: unknown container is 400", client("admin", server.MastersGroup), "/containerLogs/default/p/other", http.StatusBadRequest},
		{"a container that never started is 400", client(server.ExecProxyUser), "/containerLogs/default/p/c", http.StatusBadRequest},
		{"exec without a command is 400", client(server.ExecProxyUser), "/exec/default/p/c?output=1", http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.client.Get(base + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("%s: %d %s, want %d", tc.path, resp.StatusCode, body, tc.code)
			}
			if tc.code >= 400 {
				var st metav1.Status
				if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || int(st.Code) != tc.code {
					t.Errorf("body %s is not a Status with code %d", body, tc.code)
				}
			}
		})
	}
}
