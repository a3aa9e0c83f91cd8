// Package socketharness serves a CRI runtime on a fresh unix socket for a test and
// hands back connected clients, so tests exercise the real gRPC path the
// kubelet uses.
package socketharness

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
)

// Clients are CRI clients connected to a runtime served by Start.
type Clients struct {
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
	Conn    *grpc.ClientConn
	// Socket is the socket path the runtime is served on.
	Socket string
}

// Start serves rs and is with cri.Serve on a socket in a new directory
// under os.TempDir (t.TempDir paths can exceed the 108-byte unix socket
// limit) and dials it. When the test ends it closes the connection, stops the
// server, fails the test if Serve returned an error, and removes the
// directory; closing the runtime itself is the caller's job.
func Start(t testing.TB, rs runtimeapi.RuntimeServiceServer, is runtimeapi.ImageServiceServer) *Clients {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cri.sock")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- cri.Serve(ctx, sock, rs, is) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		os.RemoveAll(dir)
	})

	// Dial only once the socket exists, so the first connection attempt
	// succeeds instead of waiting out gRPC's reconnect backoff.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-served:
			served <- err
			t.Fatalf("Serve ended before listening: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket %s did not appear", sock)
		}
	}
	dialCtx, dialCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dialCancel()
	conn, err := cri.Dial(dialCtx, "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Clients{
		Runtime: runtimeapi.NewRuntimeServiceClient(conn),
		Image:   runtimeapi.NewImageServiceClient(conn),
		Conn:    conn,
		Socket:  sock,
	}
}
