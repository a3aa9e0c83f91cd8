package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// execStreams runs cmd through CRI Exec and the returned URL, with the SPDY
// or the WebSocket executor offering v4.channel.k8s.io (what the
// streaming server speaks; exec-proxy bridges kubectl's v5), and returns stdout, stderr and the error.
func (e *env) execStreams(t *testing.T, transport, id string, cmd []string, stdin io.Reader, tty bool) (string, string, error) {
	t.Helper()
	resp, err := e.c.Runtime.Exec(e.ctx, &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Stdin: stdin != nil, Stdout: true, Stderr: !tty, Tty: tty,
	})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	var exec remotecommand.Executor
	switch transport {
	case "spdy":
		exec, err = remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, mustURL(t, resp.Url))
	case "websocket":
		exec, err = remotecommand.NewWebSocketExecutorForProtocols(&rest.Config{}, http.MethodGet, resp.Url, "v4.channel.k8s.io")
	}
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Tty: tty}
	if !tty {
		opts.Stderr = &stderr
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	err = exec.StreamWithContext(ctx, opts)
	return stdout.String(), stderr.String(), err
}

func TestExecStreams(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", []string{"sleep", "1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hello")}}
	})
	e.start(id)

	for _, transport := range []string{"spdy", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			t.Run("output and the container's environment", func(t *testing.T) {
				out, errOut, err := e.execStreams(t, transport, id, []string{"sh", "-c", "echo $GREETING; echo oops >&2"}, nil, false)
				if err != nil || out != "hello\n" || errOut != "oops\n" {
					t.Errorf("got stdout %q stderr %q err %v, want hello, oops, nil", out, errOut, err)
				}
			})
			t.Run("exit code", func(t *testing.T) {
				_, _, err := e.execStreams(t, transport, id, []string{"sh", "-c", "exit 3"}, nil, false)
				var exitErr utilexec.ExitError
				if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
					t.Errorf("err = %v, want exit code 3", err)
				}
			})
			t.Run("stdin until EOF", func(t *testing.T) {
				if transport == "websocket" {
					t.Skip("v4.channel.k8s.io cannot signal stdin's EOF; kubectl's v5 reaches the runtime as SPDY")
				}
				out, _, err := e.execStreams(t, transport, id, []string{"cat"}, strings.NewReader("data\n"), false)
				if err != nil || out != "data\n" {
					t.Errorf("got %q, %v, want data", out, err)
				}
			})
			t.Run("tty", func(t *testing.T) {
				out, _, err := e.execStreams(t, transport, id, []string{"sh", "-c", "test -t 0 && echo is-a-tty"}, nil, true)
				if err != nil || !strings.Contains(out, "is-a-tty") {
					t.Errorf("got %q, %v, want is-a-tty", out, err)
				}
			})
		})
	}
}

func TestExecOnAStoppedContainerIsFailedPrecondition(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", []string{"true"})
	e.start(id)
	e.waitExited(id)
	_, err := e.c.Runtime.Exec(e.ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Exec: %v, want FailedPrecondition", err)
	}
}

// TestClientGoingAwayKillsTheCommand pins that a client that disconnects
// mid-stream ends the exec'd command instead of leaving it running.
func TestClientGoingAwayKillsTheCommand(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", []string{"sleep", "1000"})
	e.start(id)
	resp, err := e.c.Runtime.Exec(e.ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo $$; exec sleep 1000"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, mustURL(t, resp.Url))
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		done <- exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: io.Discard})
	}()
	var pid int
	if _, err := fmt.Fscan(pr, &pid); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	cancel()
	<-done
	pw.Close()
	waitGone(t, pid)
}

func TestPortForward(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "c", []string{"sleep", "1000"})
	e.start(id)

	// The "server in the pod": the sandbox shares the host's network.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("from the pod")) })}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	podPort := lis.Addr().(*net.TCPAddr).Port

	resp, err := e.c.Runtime.PortForward(e.ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sbID, Port: []int32{int32(podPort)}})
	if err != nil {
		t.Fatal(err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, mustURL(t, resp.Url))
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", podPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	defer func() { close(stop); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(waitTimeout):
		t.Fatal("port forward not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: waitTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	got, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(body) != "from the pod" {
		t.Errorf("body = %q, want from the pod", body)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
