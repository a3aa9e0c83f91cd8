package sim_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func stream(t *testing.T, rawURL string, stdout io.Writer) error {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
}

// TestExecRunsAHostProcess pins what the package doc says: exec in a
// simulated container runs the command on the host, with the container's
// environment.
func TestExecRunsAHostProcess(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", nil)
	e.start(id)
	resp, err := e.c.Runtime.Exec(e.ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"echo", "hello"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := stream(t, resp.Url, &out); err != nil || out.String() != "hello\n" {
		t.Errorf("got %q, %v, want hello", out.String(), err)
	}
}

// TestExecWithoutTempDir: where the system has no temporary directory (skiff's
// FROM-scratch kubelet image has no /tmp), exec still runs, in "/".
func TestExecWithoutTempDir(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", nil)
	e.start(id)
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	resp, err := e.c.Runtime.Exec(e.ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"pwd"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := stream(t, resp.Url, &out); err != nil || out.String() != "/\n" {
		t.Errorf("got %q, %v, want /", out.String(), err)
	}
}

// TestAttachFollowsTheLog: attach streams the log lines written after it.
func TestAttachFollowsTheLog(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", nil)
	e.start(id)
	resp, err := e.c.Runtime.Attach(e.ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- stream(t, resp.Url, pw); pw.Close() }()
	// Stopping the container writes "sim: exited 0" and ends the attach.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "sim: exited 0\n" {
		t.Errorf("attached and read %q, %v, want sim: exited 0", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := <-done; err != nil {
		t.Errorf("attach ended with %v", err)
	}
}
