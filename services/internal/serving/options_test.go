package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOptionsFlags parses the shared flags as a main does and checks what they build: a
// logger in the asked format and level, and the endpoints on --health-address.
func TestOptionsFlags(t *testing.T) {
	o := NewOptions("")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--log-level=warn", "--log-format=text", "--health-address=127.0.0.1:0", "--profiling"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logger, err := o.NewLogger(&out)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("dropped")
	logger.Warn("kept", "k", "v")
	if got := out.String(); strings.Contains(got, "dropped") || !strings.Contains(got, "level=WARN msg=kept k=v") {
		t.Errorf("text logger at warn wrote %q", got)
	}

	var sick atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := o.Start(ctx, NewRegistry(), WithLiveness(func() error {
		if sick.Load() {
			return errors.New("pleg stuck")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr.Health.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/debug/pprof/cmdline"); code != http.StatusOK {
		t.Errorf("--profiling: /debug/pprof/cmdline %d", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics without the Go collector: %d", code)
	}
	sick.Store(true)
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body := get(path); code != http.StatusInternalServerError || !strings.Contains(body, "pleg stuck") {
			t.Errorf("%s with a failing liveness check: %d %q", path, code, body)
		}
	}
}

func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := NewOptions(":10259")
	if o.LogFormat != LogFormatJSON || o.LogLevel != "info" || o.HealthAddress != ":10259" || o.Profiling {
		t.Fatalf("defaults: %+v", o)
	}
	var out bytes.Buffer
	logger, err := o.NewLogger(&out)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("hello")
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line["msg"] != "hello" {
		t.Errorf("default logger is not JSON: %q (%v)", out.String(), err)
	}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"unknown level", Options{LogLevel: "loud", LogFormat: "json"}},
		{"unknown format", Options{LogLevel: "info", LogFormat: "xml"}},
		{"profiling without an address", Options{LogLevel: "info", LogFormat: "json", Profiling: true}},
	} {
		if err := c.o.Validate(); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if addr, err := (&Options{}).Start(context.Background(), nil); addr != (Addresses{}) || err != nil {
		t.Errorf("Start without an address: %v, %v; want nothing served", addr, err)
	}
}

// TestMetricsAddress: with --metrics-bind-address, /metrics and /debug/pprof leave the
// health port, which answers the probes only, as kube-proxy's two listeners.
func TestMetricsAddress(t *testing.T) {
	o := NewOptions("127.0.0.1:0")
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--metrics-bind-address=127.0.0.1:0", "--profiling"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, err := o.Start(ctx, NewRegistry(), WithReadiness(func() error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if addrs.Health == nil || addrs.Metrics == nil || addrs.Secure != nil {
		t.Fatalf("Start served %+v, want the health and metrics listeners", addrs)
	}
	get := func(addr net.Addr, path string) int {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		addr net.Addr
		path string
		want int
	}{
		{addrs.Health, "/healthz", http.StatusOK},
		{addrs.Health, "/readyz", http.StatusOK},
		{addrs.Health, "/metrics", http.StatusNotFound},
		{addrs.Health, "/debug/pprof/cmdline", http.StatusNotFound},
		{addrs.Metrics, "/metrics", http.StatusOK},
		{addrs.Metrics, "/debug/pprof/cmdline", http.StatusOK},
	} {
		if got := get(c.addr, c.path); got != c.want {
			t.Errorf("GET %s on %s: %d, want %d", c.path, c.addr, got, c.want)
		}
	}
}
