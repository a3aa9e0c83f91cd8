package cri_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
)

// socketDir is a short directory for sockets: t.TempDir paths can exceed the
// 108-byte unix socket limit.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve runs Serve in the background and returns a func that cancels it and
// returns its result.
func serve(t *testing.T, sock string) (stop func() error) {
	t.Helper()
	rt := sim.New()
	t.Cleanup(rt.Close)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- cri.Serve(ctx, sock, rt, rt) }()
	t.Cleanup(cancel)
	return func() error { cancel(); return <-served }
}

func dial(t *testing.T, endpoint string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := cri.Dial(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

func TestServeUntilCancelled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint func(sock string) string
	}{
		{"unix URL", func(sock string) string { return "unix://" + sock }},
		{"plain path", func(sock string) string { return sock }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(socketDir(t), "run", "cri.sock") // the directory is created
			stop := serve(t, sock)
			client := dial(t, tc.endpoint(sock))
			v, err := client.Version(context.Background(), &runtimeapi.VersionRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if v.RuntimeName != sim.RuntimeName {
				t.Errorf("runtime name %q, want %q", v.RuntimeName, sim.RuntimeName)
			}
			fi, err := os.Stat(sock)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("socket mode %v, want 0600", perm)
			}

			if err := stop(); err != nil {
				t.Errorf("Serve after cancel = %v, want nil", err)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("socket after stop: %v, want it removed", err)
			}
		})
	}
}

func TestServeReplacesAStaleSocket(t *testing.T) {
	sock := filepath.Join(socketDir(t), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close() // leaves the socket file with nobody behind it

	stop := serve(t, sock)
	if _, err := dial(t, sock).Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

func TestServeRefusesToClobber(t *testing.T) {
	t.Run("a live socket", func(t *testing.T) {
		sock := filepath.Join(socketDir(t), "cri.sock")
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		rt := sim.New()
		defer rt.Close()
		if err := cri.Serve(context.Background(), sock, rt, rt); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("Serve on a live socket = %v, want an in-use error", err)
		}
	})
	t.Run("a regular file", func(t *testing.T) {
		path := filepath.Join(socketDir(t), "cri.sock")
		if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		rt := sim.New()
		defer rt.Close()
		if err := cri.Serve(context.Background(), path, rt, rt); err == nil {
			t.Error("Serve over a regular file succeeded")
		}
		if data, _ := os.ReadFile(path); string(data) != "data" {
			t.Error("Serve overwrote a regular file")
		}
	})
}

func TestDialErrors(t *testing.T) {
	if _, err := cri.Dial(context.Background(), "tcp://127.0.0.1:1234"); err == nil {
		t.Error("Dial of a tcp endpoint succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := cri.Dial(ctx, filepath.Join(socketDir(t), "nobody.sock")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial with nobody listening = %v, want the context's deadline error", err)
	}
}
