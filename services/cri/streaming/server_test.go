package streaming_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"skiff.dev/services/cri/streaming"
)

// hostRuntime runs exec'd commands on the host: containerID is ignored.
type hostRuntime struct{}

func (hostRuntime) Exec(ctx context.Context, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	return streaming.RunCommand(ctx, exec.Command(cmd[0], cmd[1:]...), in, out, errOut, tty, resize)
}

func (hostRuntime) Attach(context.Context, string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan streaming.TerminalSize) error {
	return errors.New("no attach")
}

func (hostRuntime) PortForward(ctx context.Context, _ string, port int32, stream io.ReadWriteCloser) error {
	return streaming.ForwardLocalPort(ctx, port, stream)
}

func exec1(t *testing.T, srv *streaming.Server, ctx context.Context, cmd []string, stdin io.Reader, stdout io.Writer) error {
	t.Helper()
	resp, err := srv.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(resp.Url)
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	return e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: io.Discard})
}

// TestStreamsEndWithTheirClientAndTheServer pins the stream lifetime: a client
// going away kills its command, Close ends the streams still open, and no
// goroutine is left afterwards.
func TestStreamsEndWithTheirClientAndTheServer(t *testing.T) {
	defer verifyNoLeaks(t, goleak.IgnoreCurrent())
	srv, err := streaming.Start("127.0.0.1:0", hostRuntime{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	var out strings.Builder
	if err := exec1(t, srv, ctx, []string{"sh", "-c", "read x; echo got $x; exit 4"}, strings.NewReader("in\n"), &out); out.String() != "got in\n" {
		t.Errorf("stdout %q, want got in", out.String())
	} else {
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 4 {
			t.Errorf("err = %v, want exit code 4", err)
		}
	}

	for _, end := range []string{"client goes away", "server closes"} {
		pr, pw := io.Pipe()
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- exec1(t, srv, sctx, []string{"sh", "-c", "echo $$; exec sleep 3600"}, nil, pw)
			pw.Close()
		}()
		var pid int
		if _, err := fmt.Fscan(pr, &pid); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		if end == "client goes away" {
			cancel()
		} else if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-done
		cancel()
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return syscall.Kill(pid, 0) != nil, nil
		}); err != nil {
			t.Fatalf("%s: command %d still runs", end, pid)
		}
	}
}

// verifyNoLeaks fails t if goroutines beyond opts' remain after 5 s: libraries
// end some of theirs a little after a connection closes (spdystream hands a
// closed connection's error over for up to 1 s).
func verifyNoLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	var leaked error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		leaked = goleak.Find(opts...)
		return leaked == nil, nil
	}); err != nil {
		t.Error(leaked)
	}
}
