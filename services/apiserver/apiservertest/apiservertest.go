// Package apiservertest starts a real skiff apiserver over a real embedded etcd for tests
// of the apiserver's clients (scheduler, kubelet, end-to-end suites). Nothing is faked:
// requests go over loopback HTTP and land in etcd.
package apiservertest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/internal/embedetcd"
)

// Server is a running test apiserver.
type Server struct {
	// Config reaches the apiserver at its loopback URL.
	Config *rest.Config
	// URL is the apiserver's base URL, e.g. "http://127.0.0.1:41234".
	URL string
	// Etcd is the embedded etcd beneath it.
	Etcd *embedetcd.Etcd

	t      testing.TB
	addr   string
	client *clientv3.Client

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
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
	etcd, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	client, err := etcd.Client()
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &Server{t: t, Etcd: etcd, client: client, addr: l.Addr().String()}
	s.URL = "http://" + s.addr
	s.Config = &rest.Config{Host: s.URL, QPS: 1000, Burst: 1000}
	t.Cleanup(s.StopAPIServer)
	s.serve(l)
	return s
}

// serve runs an apiserver on l until StopAPIServer and waits for the system namespaces.
func (s *Server) serve(l net.Listener) {
	s.t.Helper()
	api, err := apiserver.New(apiserver.Config{Etcd: s.client})
	if err != nil {
		s.t.Fatalf("apiserver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := api.Serve(ctx, l); err != nil {
			s.t.Errorf("apiserver serve: %v", err)
		}
	}()
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
	if err := api.EnsureSystemNamespaces(ctx); err != nil {
		s.t.Fatalf("system namespaces: %v", err)
	}
}

// StopAPIServer stops the apiserver (etcd keeps running), closing every open watch, as a
// crash or a rolling restart does. It is a no-op when it is already stopped.
func (s *Server) StopAPIServer() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// RestartAPIServer stops the apiserver and starts a new one on the same address over the
// same etcd, so clients reconnect to the URL they know.
func (s *Server) RestartAPIServer() {
	s.t.Helper()
	s.StopAPIServer()
	var l net.Listener
	var err error
	// The old listener's port is free again once Serve returned; retry briefly in case
	// the kernel has not released it yet.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if l, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.serve(l)
}
