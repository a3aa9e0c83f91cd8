// Package apiservertest starts a real skiff apiserver over a real embedded etcd for tests
// of the apiserver's clients (scheduler, kubelet, end-to-end suites). Nothing is faked:
// requests go over loopback HTTP and land in etcd.
package apiservertest

import (
	"context"
	"net"
	"testing"

	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/embedetcd"
)

// Server is a running test apiserver.
type Server struct {
	// Config reaches the apiserver at its loopback URL, with JSON bodies.
	Config *rest.Config
	// URL is the apiserver's base URL, e.g. "http://127.0.0.1:41234".
	URL string
	// Etcd is the embedded etcd beneath it.
	Etcd *embedetcd.Etcd
}

// Start runs etcd (data in t.TempDir()) and an apiserver on 127.0.0.1 with a free port,
// waits until the system namespaces exist, and stops both when the test ends. It fails
// the test if either cannot start.
func Start(t testing.TB) *rest.Config {
	return StartServer(t).Config
}

// StartServer is Start, returning the whole Server.
func StartServer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		cancel()
		t.Fatalf("start etcd: %v", err)
	}
	client, err := etcd.Client()
	if err != nil {
		cancel()
		etcd.Close()
		t.Fatalf("etcd client: %v", err)
	}
	api, err := apiserver.New(apiserver.Config{Etcd: client})
	if err != nil {
		cancel()
		t.Fatalf("apiserver: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := api.Serve(ctx, l); err != nil {
			t.Errorf("apiserver serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = client.Close()
		etcd.Close()
	})
	if err := api.EnsureSystemNamespaces(ctx); err != nil {
		t.Fatalf("system namespaces: %v", err)
	}
	url := "http://" + l.Addr().String()
	return &Server{
		Config: &rest.Config{Host: url, QPS: 1000, Burst: 1000},
		URL:    url,
		Etcd:   etcd,
	}
}
