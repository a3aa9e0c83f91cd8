package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	utilexec "k8s.io/utils/exec"
)

// outputDrainTimeout bounds how long a command's output is still copied after
// it exited; only a background process that kept the output open could hold it
// longer.
const outputDrainTimeout = 2 * time.Second

// RunCommand runs cmd as a host process on the client's streams and returns
// when it has exited and its output has been copied: nil for exit code 0, a
// k8s.io/utils/exec.ExitError carrying the exit code (128+signal when a signal
// killed it) otherwise, which the streaming server reports to kubectl as
// NonZeroExitCode. in, out and errOut may be nil. With tty the command gets a
// pseudo-terminal as its controlling terminal (stdout and stderr both go to
// out) sized from resize; without, it gets pipes, and in's EOF closes its
// stdin. The command runs in a process group of its own that is killed with
// SIGKILL when ctx ends (the client went away) and when the command returns,
// so nothing it started outlives the stream. Errors before the start (no such
// program) are returned as is.
func RunCommand(ctx context.Context, cmd *exec.Cmd, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan TerminalSize) error {
	var copies sync.WaitGroup
	var closers []io.Closer
	var pgid int
	if tty {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
		ptmx, err := pty.StartWithAttrs(cmd, nil, cmd.SysProcAttr)
		if err != nil {
			return err
		}
		closers = append(closers, ptmx)
		pgid = cmd.Process.Pid
		if in != nil {
			go func() { _, _ = io.Copy(ptmx, in) }()
		}
		if resize != nil {
			go func() {
				for size := range resize {
					_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
				}
			}()
		}
		copies.Add(1)
		go func() {
			defer copies.Done()
			// Reading the terminal fails with EIO once the command and its
			// children have closed it.
			_, _ = io.Copy(writerOrDiscard(out), ptmx)
		}()
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var stdinW *os.File
		if in != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			cmd.Stdin, stdinW = r, w
			defer r.Close()
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			return err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return err
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		err = cmd.Start()
		outW.Close()
		errW.Close()
		if err != nil {
			outR.Close()
			errR.Close()
			if stdinW != nil {
				stdinW.Close()
			}
			return err
		}
		closers = append(closers, outR, errR)
		pgid = cmd.Process.Pid
		if stdinW != nil {
			closers = append(closers, stdinW)
			go func() {
				_, _ = io.Copy(stdinW, in)
				stdinW.Close()
			}()
		}
		copies.Add(2)
		go func() { defer copies.Done(); _, _ = io.Copy(writerOrDiscard(out), outR) }()
		go func() { defer copies.Done(); _, _ = io.Copy(writerOrDiscard(errOut), errR) }()
	}

	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
	stop := context.AfterFunc(ctx, killGroup)
	waitErr := cmd.Wait()
	stop()
	killGroup()

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	timer := time.NewTimer(outputDrainTimeout)
	select {
	case <-drained:
	case <-timer.C:
	}
	timer.Stop()
	for _, c := range closers {
		c.Close()
	}
	<-drained

	if waitErr == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return waitErr
	}
	code := exitErr.ExitCode()
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
}

func writerOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ForwardLocalPort connects stream to TCP port on the host's loopback, as a
// runtime's PortForward connects it to the port inside the pod's network
// namespace (the built-in runtimes' pods share the host network). It returns
// when either side has closed, or ctx has ended. Errors: nothing listens on
// the port.
func ForwardLocalPort(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port forward to port %d: %w", port, err)
	}
	defer conn.Close()
	// The answer's end (the server closed its side) ends the forward; the
	// client's EOF only half-closes the connection, so the answer still
	// arrives; a broken client stream aborts it.
	answered := make(chan struct{})
	aborted := make(chan struct{})
	go func() {
		_, err := io.Copy(conn, stream)
		if err != nil {
			close(aborted)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		close(answered)
	}()
	select {
	case <-answered:
	case <-aborted:
	case <-ctx.Done():
	}
	conn.Close()
	stream.Close()
	return nil
}
