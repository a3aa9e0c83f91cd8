package componentbase

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

func TestClientOptionsFlagsAndComplete(t *testing.T) {
	o := NewClientOptions(50, 100)
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs, "whose kubeconfig")
	if err := fs.Parse([]string{"--kube-api-qps=-1", "--kube-api-content-type=application/json"}); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	o.Complete(cfg, noop.NewTracerProvider(), "skiff-test")
	if cfg.QPS != -1 || cfg.Burst != 100 || cfg.UserAgent != "skiff-test" {
		t.Errorf("QPS %v burst %d user agent %q, want -1, 100, skiff-test", cfg.QPS, cfg.Burst, cfg.UserAgent)
	}
	if cfg.ContentType != runtime.ContentTypeJSON {
		t.Errorf("content type %q, want JSON", cfg.ContentType)
	}
	if cfg.WrapTransport == nil {
		t.Error("no tracing transport")
	}
	var _ transport.WrapperFunc = cfg.WrapTransport
}

func TestNATSOptionsWithoutURL(t *testing.T) {
	var o NATSOptions
	tlsConfig, user, err := o.ClientTLS(&rest.Config{})
	if tlsConfig != nil || user != "" || err != nil {
		t.Fatalf("ClientTLS without a URL = %v, %q, %v; want nothing", tlsConfig, user, err)
	}
	o.CertFile = "/nonexistent"
	o.URL = "tls://127.0.0.1:4222"
	if _, _, err := o.ClientTLS(&rest.Config{}); err == nil {
		t.Fatal("a certificate without a CA was accepted")
	}
}

func TestMainExitCodes(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{Usagef(errors.New("--port: out of range")), 2},
		{errors.New("listen: address in use"), 1},
		{context.Canceled, 1}, // canceled while no signal ended the context: a failure
	} {
		if got := Main(logger, func(context.Context) error { return tc.err }); got != tc.want {
			t.Errorf("Main returning %v = %d, want %d", tc.err, got, tc.want)
		}
	}
	if Usagef(nil) != nil {
		t.Error("Usagef(nil) is not nil")
	}
}
