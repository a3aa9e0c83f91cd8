package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/execproxy"
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/internal/componentbase/flagtest"
	"skiff.dev/services/internal/componentbase/runtest"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/tunnel"
)

// exec-proxy's flags, defaults and usages are those of cmd/exec-proxy before package app
// (testdata/flags.golden is its -h) plus componentbase's --kube-api-* with client-go's
// defaults (JSON, 5 QPS), as before: scripts, compose.yaml and deploy/ rely on them.
func TestFlagsAsBefore(t *testing.T) {
	fs := flag.NewFlagSet("exec-proxy", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	flagtest.Golden(t, fs, "testdata/flags.golden")
}

func TestValidate(t *testing.T) {
	var usage componentbase.UsageError
	if err := NewOptions().Run(context.Background()); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--requestheader-client-ca-file") {
		t.Fatalf("Run without --requestheader-client-ca-file = %v, want a UsageError", err)
	}
}

func TestRunWithoutServingTLS(t *testing.T) {
	if err := (&Config{}).Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "building exec-proxy: ") {
		t.Fatalf("Run without ServingTLS = %v, want a building exec-proxy error", err)
	}
}

// TestRunServes builds a Config as the all-in-one does, from in-memory TLS material and
// listeners it opened: Run serves /healthz over HTTPS and the tunnel port, and returns
// nil once ctx ends.
func TestRunServes(t *testing.T) {
	ca, err := pki.NewCA("cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueServing("exec-proxy", []string{"127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l, tl := listen(), listen()
	c := &Config{
		Proxy:          execproxy.Config{Client: fake.NewClientset(), KubeletTLS: execproxy.KubeletClientTLS(serving, ca.CertPool())},
		Listener:       l,
		ServingTLS:     &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: frontProxyCA.CertPool()},
		TunnelListener: tl,
		TunnelTLS:      tunnel.ServerTLS(serving, ca.CertPool()),
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.CertPool()}}}
	runtest.Until(t, c.Run, func(context.Context) error {
		resp, err := client.Get("https://" + l.Addr().String() + "/healthz")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			return fmt.Errorf("/healthz = %q, want ok", body)
		}
		// The tunnel port serves TLS with the serving certificate.
		conn, err := tls.Dial("tcp", tl.Addr().String(), &tls.Config{RootCAs: ca.CertPool(), NextProtos: []string{"h2"}})
		if err != nil {
			return fmt.Errorf("tunnel port: %w", err)
		}
		return conn.Close()
	})
}
