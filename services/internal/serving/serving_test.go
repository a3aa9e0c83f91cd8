package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	ready := func() error {
		if broken.Load() {
			return errors.New("apiserver unreachable")
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "skiff_test_total", Help: "a test counter"})
	reg.MustRegister(counter)
	counter.Inc()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, ready, reg) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body := get(path); code != 200 || body != "ok" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	broken.Store(true)
	if code, body := get("/readyz"); code != 500 || !strings.Contains(body, "apiserver unreachable") {
		t.Errorf("/readyz when not ready: %d %q", code, body)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz stays up when not ready: %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "skiff_test_total 1") {
		t.Errorf("/metrics: %s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

func TestProfiling(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     []Option
		wantCode int
	}{
		{"off by default", nil, http.StatusNotFound},
		{"served with WithProfiling", []Option{WithProfiling()}, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, l, nil, nil, c.opts...) }()
			defer func() { cancel(); <-done }()
			resp, err := http.Get("http://" + l.Addr().String() + "/debug/pprof/goroutine?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.wantCode {
				t.Fatalf("/debug/pprof/goroutine: %d, want %d", resp.StatusCode, c.wantCode)
			}
			if c.wantCode == http.StatusOK && !strings.Contains(string(body), "goroutine profile") {
				t.Errorf("/debug/pprof/goroutine is no goroutine profile: %.200s", body)
			}
		})
	}
}

func TestServeTLSRequiresClientCAs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ServeTLS(context.Background(), l, http.NotFoundHandler(), &tls.Config{}, "test"); err == nil {
		t.Fatal("ServeTLS served without a CA to verify clients")
	}
	if _, err := l.Accept(); err == nil {
		t.Fatal("the listener was left open")
	}
}
