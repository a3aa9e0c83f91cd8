package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/runtime/criolog"
	"skiff.dev/services/runtime/criservice"
	"skiff.dev/services/runtime/streaming"
)

// maxExecOutput caps each of ExecSync's stdout and stderr, in bytes, at the
// largest CRI message.
const maxExecOutput = 16 << 20

// driver runs containers as host process groups; it is the criservice.Driver
// and criservice.Execer of Runtime.
type driver struct {
	sandboxesDir string
	podIP        string

	mu     sync.Mutex
	closed bool
	procs  map[string]*proc    // running containers by ID
	execs  map[*group]struct{} // running ExecSync commands
	wg     sync.WaitGroup      // waiters of procs and execs
}

// proc is a running container.
type proc struct {
	g          *group
	stopSignal syscall.Signal
	done       chan struct{} // closed once the exit has been reported
}

func newDriver(sandboxesDir, podIP string) *driver {
	return &driver{
		sandboxesDir: sandboxesDir,
		podIP:        podIP,
		procs:        map[string]*proc{},
		execs:        map[*group]struct{}{},
	}
}

func (d *driver) sandboxDir(id string) string { return filepath.Join(d.sandboxesDir, id) }

// RunSandbox creates the sandbox's directory; every sandbox gets the host's IP.
func (d *driver) RunSandbox(id string, _ *runtimeapi.PodSandboxConfig) (string, error) {
	if err := os.MkdirAll(d.sandboxDir(id), 0o755); err != nil {
		return "", fmt.Errorf("create sandbox directory: %w", err)
	}
	return d.podIP, nil
}

// StopSandbox has nothing to reclaim: sandboxes use the host network.
func (d *driver) StopSandbox(string) {}

// RemoveSandbox deletes the sandbox's directory.
func (d *driver) RemoveSandbox(id string) error {
	return os.RemoveAll(d.sandboxDir(id))
}

// ValidateContainer refuses a container with neither command nor args:
// there is no image entrypoint to fall back on.
func (d *driver) ValidateContainer(_ *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) error {
	if len(cfg.GetCommand()) == 0 && len(cfg.GetArgs()) == 0 {
		return status.Errorf(codes.InvalidArgument,
			"container %q has no command: the process runtime runs a container's command as a host process and cannot run images, "+
				"so set command (and args) in the pod spec", cfg.GetMetadata().GetName())
	}
	return nil
}

// command builds the exec.Cmd for argv in container c.
func (d *driver) command(c *criservice.ContainerSpec, argv []string) (*exec.Cmd, error) {
	env := containerEnv(c.Sandbox, c.Config)
	dir := workingDir(c.Config, d.sandboxDir(c.SandboxID))
	path, err := lookPath(argv[0], lookupEnv(env, "PATH"), dir)
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir}, nil
}

// StartContainer starts argv (command + args) as the leader of a new process
// group and reports its exit from a waiter goroutine. ctx is not needed:
// the start is over once the process exists.
func (d *driver) StartContainer(_ context.Context, c *criservice.ContainerSpec, log *criolog.File, exited func(criservice.ExitStatus)) (time.Time, error) {
	argv := append(append([]string{}, c.Config.GetCommand()...), c.Config.GetArgs()...)
	cmd, err := d.command(c, argv)
	if err != nil {
		return time.Time{}, err
	}
	copyTo := func(s criolog.Stream) func(io.Reader) {
		return func(r io.Reader) { _ = criolog.Copy(log, s, r) }
	}

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return time.Time{}, status.Error(codes.Unavailable, "runtime is shut down")
	}
	g, err := startGroup(cmd, copyTo(criolog.Stdout), copyTo(criolog.Stderr))
	if err != nil {
		d.mu.Unlock()
		return time.Time{}, err
	}
	startedAt := time.Now()
	p := &proc{g: g, stopSignal: stopSignal(c.Config.GetStopSignal()), done: make(chan struct{})}
	d.procs[c.ID] = p
	d.wg.Add(1)
	d.mu.Unlock()

	go func() {
		defer d.wg.Done()
		code, finishedAt := g.wait()
		exited(criservice.ExitStatus{ExitCode: code, FinishedAt: finishedAt})
		close(p.done)
		d.mu.Lock()
		delete(d.procs, c.ID)
		d.mu.Unlock()
	}()
	return startedAt, nil
}

// stopSignal maps a CRI stop signal to a host signal; the runtime default,
// and any signal this host does not know, is SIGTERM.
func stopSignal(sig runtimeapi.Signal) syscall.Signal {
	if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return syscall.SIGTERM
	}
	if s := unix.SignalNum(strings.TrimPrefix(sig.String(), "SIGNAL_")); s != 0 {
		return s
	}
	return syscall.SIGTERM
}

// StopContainer signals the container's whole process group: the stop
// signal, then SIGKILL after timeout.
func (d *driver) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	d.mu.Lock()
	p := d.procs[id]
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	if timeout > 0 {
		if err := p.g.signal(p.stopSignal); err != nil {
			return fmt.Errorf("signal container %s: %w", id, err)
		}
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
	if err := p.g.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill container %s: %w", id, err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ExecSync runs argv like the container's own command (same environment,
// working directory and PATH lookup) in its own process group, which is
// killed on timeout, on ctx's end, and when the command returns.
func (d *driver) ExecSync(ctx context.Context, c *criservice.ContainerSpec, argv []string, timeout time.Duration) (*runtimeapi.ExecSyncResponse, error) {
	cmd, err := d.command(c, argv)
	if err != nil {
		return nil, status.Errorf(codes.Unknown, "exec failed: %v", err)
	}
	stdout := &cappedBuffer{max: maxExecOutput}
	stderr := &cappedBuffer{max: maxExecOutput}
	copyTo := func(b *cappedBuffer) func(io.Reader) {
		return func(r io.Reader) { _, _ = io.Copy(b, r) }
	}

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "runtime is shut down")
	}
	g, err := startGroup(cmd, copyTo(stdout), copyTo(stderr))
	if err != nil {
		d.mu.Unlock()
		return nil, status.Errorf(codes.Unknown, "exec failed: %v", err)
	}
	d.execs[g] = struct{}{}
	d.wg.Add(1)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.execs, g)
		d.mu.Unlock()
		d.wg.Done()
	}()

	exitCode := make(chan int32, 1)
	go func() {
		code, _ := g.wait()
		exitCode <- code
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case code := <-exitCode:
		return &runtimeapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code}, nil
	case <-expired:
		_ = g.signal(syscall.SIGKILL)
		<-exitCode
		return nil, status.Errorf(codes.DeadlineExceeded, "command %q timed out after %s", strings.Join(argv, " "), timeout)
	case <-ctx.Done():
		_ = g.signal(syscall.SIGKILL)
		<-exitCode
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Close kills every process group it started and waits until each has been
// reaped and reported.
func (d *driver) Close() {
	d.mu.Lock()
	d.closed = true
	for _, p := range d.procs {
		_ = p.g.signal(syscall.SIGKILL)
	}
	for g := range d.execs {
		_ = g.signal(syscall.SIGKILL)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// cappedBuffer keeps the first max bytes written to it and discards the rest,
// so a chatty command cannot exhaust memory.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

// Write keeps what fits and always reports success, so the copier keeps
// draining the pipe.
func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *cappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Exec runs argv like the container's own command (same environment, working
// directory and PATH lookup) on the client's streams; see
// streaming.RunCommand.
func (d *driver) Exec(ctx context.Context, c *criservice.ContainerSpec, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	cmd, err := d.command(c, argv)
	if err != nil {
		return fmt.Errorf("exec failed: %w", err)
	}
	return streaming.RunCommand(ctx, cmd, in, out, errOut, tty, resize)
}

// PortForward connects stream to port on the host's loopback: every sandbox
// shares the host network.
func (d *driver) PortForward(ctx context.Context, _ string, port int32, stream io.ReadWriteCloser) error {
	return streaming.ForwardLocalPort(ctx, port, stream)
}
