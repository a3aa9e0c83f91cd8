package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/criservice"
	"skiff.dev/services/cri/streaming"
)

// maxExecOutput caps each of ExecSync's stdout and stderr, in bytes, at the
// largest CRI message.
const maxExecOutput = 16 << 20

// driver runs containers as host process groups, each started through the
// container init (containerinit.go); it is the criservice.Driver,
// criservice.Execer and criservice.Streamer of Runtime.
type driver struct {
	sandboxesDir string
	stagingDir   string // empty; the init assembles shadow directories on it
	podIP        string
	cgroups      *cgroupsConfig

	probeMounts sync.Once
	mountsErr   error // why containers cannot get mount namespaces

	mu     sync.Mutex
	closed bool
	procs  map[string]*proc    // running containers by ID
	execs  map[*group]struct{} // running ExecSync commands
	podCgs map[string]string   // sandbox ID → its pod cgroup
	wg     sync.WaitGroup      // waiters of procs and execs, and starts
}

// proc is a running container.
type proc struct {
	g          *group
	stopSignal syscall.Signal
	done       chan struct{}    // closed once the exit has been reported
	cgroup     *containerCgroup // nil without cgroups
	mountNS    bool             // it has its own mount namespace
}

func newDriver(sandboxesDir, stagingDir, podIP string, cg *cgroupsConfig) *driver {
	return &driver{
		sandboxesDir: sandboxesDir,
		stagingDir:   stagingDir,
		podIP:        podIP,
		cgroups:      cg,
		procs:        map[string]*proc{},
		execs:        map[*group]struct{}{},
		podCgs:       map[string]string{},
	}
}

func (d *driver) sandboxDir(id string) string { return filepath.Join(d.sandboxesDir, id) }

// RunSandbox refuses what the runtime cannot honour (sysctls, privileged,
// user namespaces, a systemd cgroup parent), creates the sandbox's
// directory and records its pod cgroup; every sandbox gets the host's IP.
func (d *driver) RunSandbox(id string, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	if err := refuseUnsupportedSandbox(cfg); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "the process runtime cannot honour %v", err)
	}
	podCg, err := podCgroup(id, cfg)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	if err := os.MkdirAll(d.sandboxDir(id), 0o755); err != nil {
		return "", fmt.Errorf("create sandbox directory: %w", err)
	}
	d.mu.Lock()
	d.podCgs[id] = podCg
	d.mu.Unlock()
	return d.podIP, nil
}

// StopSandbox has nothing to reclaim: sandboxes use the host network.
func (d *driver) StopSandbox(string) {}

// RemoveSandbox deletes the sandbox's directory and its pod cgroup.
func (d *driver) RemoveSandbox(id string) error {
	d.mu.Lock()
	podCg, ok := d.podCgs[id]
	delete(d.podCgs, id)
	d.mu.Unlock()
	if ok && d.cgroups.unusable == nil {
		if err := d.cgroups.removePodCgroup(podCg); err != nil {
			return fmt.Errorf("remove pod cgroup %s: %w", podCg, err)
		}
	}
	return os.RemoveAll(d.sandboxDir(id))
}

// mountNamespaces returns why containers cannot get their own mount
// namespace here (nil: they can), finding out once by running the init.
func (d *driver) mountNamespaces() error {
	d.probeMounts.Do(func() {
		cmd, cfgFile, err := initCommand(&initConfig{Probe: true, NewMountNS: true})
		if err != nil {
			d.mountsErr = err
			return
		}
		defer cfgFile.Close()
		if out, err := cmd.CombinedOutput(); err != nil {
			d.mountsErr = fmt.Errorf("%s", bytes.TrimSpace(out))
			if len(out) == 0 {
				d.mountsErr = err
			}
		}
	})
	return d.mountsErr
}

// ValidateContainer refuses, with InvalidArgument (the kubelet's
// CreateContainerError), a container the process runtime cannot honour:
// no command (there is no image entrypoint to fall back on); a field
// refuseUnsupported lists; mounts it cannot make (no root, a Bidirectional
// propagation...); resources no cgroup can enforce here; a user it cannot
// switch to. The first container with mounts runs the init once to find out
// whether mount namespaces can be made here.
func (d *driver) ValidateContainer(_ *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) error {
	name := cfg.GetMetadata().GetName()
	if len(cfg.GetCommand()) == 0 && len(cfg.GetArgs()) == 0 {
		return status.Errorf(codes.InvalidArgument,
			"container %q has no command: the process runtime runs a container's command as a host process and cannot run images, "+
				"so set command (and args) in the pod spec", name)
	}
	if err := refuseUnsupported(cfg); err != nil {
		return status.Errorf(codes.InvalidArgument, "container %q: the process runtime cannot honour %v", name, err)
	}
	mounts, err := validateMounts(cfg.GetMounts())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "container %q: %v", name, err)
	}
	if len(mounts) > 0 {
		if err := d.mountNamespaces(); err != nil {
			return status.Errorf(codes.InvalidArgument, "container %q: the process runtime needs root for volume mounts: %v", name, err)
		}
	}
	if sc := cfg.GetLinux().GetSecurityContext(); len(sc.GetMaskedPaths()) > 0 || len(sc.GetReadonlyPaths()) > 0 {
		if err := d.mountNamespaces(); err != nil {
			return status.Errorf(codes.InvalidArgument, "container %q: the process runtime needs root for masked and read-only paths (procMount): %v", name, err)
		}
	}
	r := cfg.GetLinux().GetResources()
	if needsCgroup(r) && d.cgroups.unusable != nil {
		return status.Errorf(codes.InvalidArgument, "container %q: the process runtime cannot enforce its resources (%s): %v",
			name, describeResources(r), d.cgroups.unusable)
	}
	if _, err := d.cgroups.resources(r); err != nil {
		return status.Errorf(codes.InvalidArgument, "container %q: %v", name, err)
	}
	if err := checkUser(containerUser(cfg.GetLinux().GetSecurityContext())); err != nil {
		return status.Errorf(codes.InvalidArgument, "container %q: %v", name, err)
	}
	return nil
}

// describeResources names the limits of r for an error message.
func describeResources(r *runtimeapi.LinuxContainerResources) string {
	var parts []string
	if m := r.GetMemoryLimitInBytes(); m > 0 {
		parts = append(parts, fmt.Sprintf("memory limit %d bytes", m))
	}
	if q := r.GetCpuQuota(); q > 0 {
		parts = append(parts, fmt.Sprintf("cpu quota %dus per %dus", q, r.GetCpuPeriod()))
	}
	if r.GetCpusetCpus() != "" || r.GetCpusetMems() != "" {
		parts = append(parts, "cpuset")
	}
	if len(r.GetHugepageLimits()) > 0 {
		parts = append(parts, "hugepage limits")
	}
	if len(r.GetUnified()) > 0 || r.GetMemorySwapLimitInBytes() > 0 {
		parts = append(parts, "other cgroup settings")
	}
	return strings.Join(parts, ", ")
}

// initConfig returns the container init's config that runs argv as
// container c's processes run: its environment, working directory, user and
// no_new_privs.
func (d *driver) initConfig(c *criservice.ContainerSpec, argv []string) *initConfig {
	sc := c.Config.GetLinux().GetSecurityContext()
	return &initConfig{
		Argv:        argv,
		Env:         containerEnv(c.Sandbox, c.Config),
		Dir:         c.Config.GetWorkingDir(),
		FallbackDir: d.sandboxDir(c.SandboxID),
		User:        containerUser(sc),
		NoNewPrivs:  sc.GetNoNewPrivs(),
	}
}

// execConfig returns the init config that runs argv inside running
// container c: its mount namespace, cgroup and identity. Errors:
// FailedPrecondition when the container is not running.
func (d *driver) execConfig(c *criservice.ContainerSpec, argv []string) (*initConfig, error) {
	d.mu.Lock()
	p := d.procs[c.ID]
	d.mu.Unlock()
	if p == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", c.ID)
	}
	cfg := d.initConfig(c, argv)
	if p.cgroup != nil {
		cfg.Cgroups = p.cgroup.dirs()
	}
	if p.mountNS {
		cfg.JoinMountNS = fmt.Sprintf("/proc/%d/ns/mnt", p.g.pgid)
	}
	return cfg, nil
}

// StartContainer makes the container's cgroup (when cgroups can be made:
// <pod cgroup>/<container ID>, with its resources), starts the container
// init as the leader of a new process group — it joins the cgroup, makes
// the mounts in a new mount namespace, switches user and execs the command
// — and reports the exit from a waiter goroutine: after the leader exits,
// everything left in the process group and the cgroup is killed, the
// reason is "OOMKilled" if the kernel's OOM killer killed a process of the
// cgroup, and the cgroup is removed. Failures before the exec (no such
// program, a mount that cannot be made) are returned as the start's error.
func (d *driver) StartContainer(ctx context.Context, c *criservice.ContainerSpec, log *criolog.File, exited func(criservice.ExitStatus)) (time.Time, error) {
	argv := append(append([]string{}, c.Config.GetCommand()...), c.Config.GetArgs()...)
	cfg := d.initConfig(c, argv)
	mounts, err := validateMounts(c.Config.GetMounts())
	if err != nil {
		return time.Time{}, err
	}
	sc := c.Config.GetLinux().GetSecurityContext()
	if len(mounts) > 0 || len(sc.GetMaskedPaths()) > 0 || len(sc.GetReadonlyPaths()) > 0 {
		cfg.NewMountNS, cfg.StagingDir, cfg.Mounts = true, d.stagingDir, mounts
		cfg.MaskedPaths, cfg.ReadonlyPaths = sc.GetMaskedPaths(), sc.GetReadonlyPaths()
	}
	r := c.Config.GetLinux().GetResources()
	if score := r.GetOomScoreAdj(); score != 0 {
		// As containerd's restrict_oom_score_adj: never below the runtime's own.
		score = max(score, ownOOMScoreAdj())
		cfg.OOMScore = &score
	}

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return time.Time{}, status.Error(codes.Unavailable, "runtime is shut down")
	}
	d.wg.Add(1)
	podCg, ok := d.podCgs[c.SandboxID]
	d.mu.Unlock()
	if !ok {
		if podCg, err = podCgroup(c.SandboxID, c.Sandbox); err != nil {
			d.wg.Done()
			return time.Time{}, err
		}
	}
	started := false
	defer func() {
		if !started {
			d.wg.Done()
		}
	}()

	var cg *containerCgroup
	if d.cgroups.unusable == nil {
		if cg, err = d.cgroups.newContainerCgroup(podCg, c.ID, r); err != nil {
			return time.Time{}, fmt.Errorf("cgroup for container %s: %w", c.ID, err)
		}
		cfg.Cgroups = cg.dirs()
	}
	var killRest func()
	if cg != nil {
		killRest = func() { _ = cg.killAll(outputDrainTimeout) }
	}
	copyTo := func(s criolog.Stream) func(io.Reader) {
		return func(r io.Reader) { _ = criolog.Copy(log, s, r) }
	}
	g, err := startInit(ctx, cfg, copyTo(criolog.Stdout), copyTo(criolog.Stderr), killRest)
	if err != nil {
		if cg != nil {
			_ = cg.destroy()
		}
		return time.Time{}, err
	}
	startedAt := time.Now()
	p := &proc{
		g:          g,
		stopSignal: stopSignal(c.Config.GetStopSignal()),
		done:       make(chan struct{}),
		cgroup:     cg,
		mountNS:    cfg.NewMountNS,
	}
	d.mu.Lock()
	d.procs[c.ID] = p
	if d.closed {
		_ = g.signal(syscall.SIGKILL)
	}
	d.mu.Unlock()
	started = true

	go func() {
		defer d.wg.Done()
		code, finishedAt := g.wait(killRest)
		st := criservice.ExitStatus{ExitCode: code, FinishedAt: finishedAt}
		if cg != nil {
			if cg.oomKilled() {
				st.Reason = oomKilledReason
			}
			if err := cg.destroy(); err != nil {
				st.Message = fmt.Sprintf("remove cgroup: %v", err)
			}
		}
		exited(st)
		close(p.done)
		d.mu.Lock()
		delete(d.procs, c.ID)
		d.mu.Unlock()
	}()
	return startedAt, nil
}

// oomKilledReason is the CRI status reason of a container in which the
// kernel's OOM killer killed a process, as containerd reports it.
const oomKilledReason = "OOMKilled"

// ownOOMScoreAdj is the runtime's own oom_score_adj (0 if unreadable).
func ownOOMScoreAdj() int64 {
	data, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// UpdateContainerResources applies r to a running container's cgroup.
// Errors: the container runs without a cgroup and r needs one.
func (d *driver) UpdateContainerResources(id string, r *runtimeapi.LinuxContainerResources) error {
	d.mu.Lock()
	p := d.procs[id]
	d.mu.Unlock()
	switch {
	case p == nil:
		return nil // not running: the start applies the recorded resources
	case p.cgroup == nil:
		if needsCgroup(r) {
			return status.Errorf(codes.InvalidArgument, "the process runtime cannot enforce resources (%s): %v", describeResources(r), d.cgroups.unusable)
		}
		return nil
	}
	return d.cgroups.update(p.cgroup, r)
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

// ExecSync runs argv inside running container c — its mount namespace,
// cgroup, user, environment, working directory and PATH lookup — in its own
// process group, which is killed on timeout, on ctx's end, and when the
// command returns. Errors: FailedPrecondition when the container is not
// running; Unknown when the command cannot be started; DeadlineExceeded on
// timeout.
func (d *driver) ExecSync(ctx context.Context, c *criservice.ContainerSpec, argv []string, timeout time.Duration) (*runtimeapi.ExecSyncResponse, error) {
	cfg, err := d.execConfig(c, argv)
	if err != nil {
		return nil, err
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
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	g, err := startInit(ctx, cfg, copyTo(stdout), copyTo(stderr), nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, execCtxError(ctx, argv, timeout)
		}
		return nil, status.Errorf(codes.Unknown, "exec failed: %v", err)
	}
	d.mu.Lock()
	d.execs[g] = struct{}{}
	if d.closed {
		_ = g.signal(syscall.SIGKILL)
	}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.execs, g)
		d.mu.Unlock()
	}()

	exitCode := make(chan int32, 1)
	go func() {
		code, _ := g.wait(nil)
		exitCode <- code
	}()
	select {
	case code := <-exitCode:
		return &runtimeapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code}, nil
	case <-ctx.Done():
		_ = g.signal(syscall.SIGKILL)
		<-exitCode
		return nil, execCtxError(ctx, argv, timeout)
	}
}

// execCtxError is ExecSync's error once ctx ended: DeadlineExceeded naming
// the command when its timeout passed, as containerd words it, else ctx's.
func execCtxError(ctx context.Context, argv []string, timeout time.Duration) error {
	if timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Errorf(codes.DeadlineExceeded, "command %q timed out after %s", strings.Join(argv, " "), timeout)
	}
	return status.FromContextError(ctx.Err()).Err()
}

// Close kills every process group it started, waits until each has been
// reaped and reported, and removes the pod cgroups of the sandboxes it
// still has (their containers are gone).
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
	if d.cgroups.unusable != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, podCg := range d.podCgs {
		_ = d.cgroups.removePodCgroup(podCg)
		delete(d.podCgs, id)
	}
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

// Exec runs argv inside running container c like ExecSync, on the client's
// streams; see streaming.RunCommand. A command that cannot be run ends with
// the reason on stderr and exit code 127 (not found) or 126, as a shell's.
func (d *driver) Exec(ctx context.Context, c *criservice.ContainerSpec, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	cfg, err := d.execConfig(c, argv)
	if err != nil {
		return err
	}
	cmd, cfgFile, err := initCommand(cfg)
	if err != nil {
		return fmt.Errorf("exec failed: %w", err)
	}
	defer cfgFile.Close()
	return streaming.RunCommand(ctx, cmd, in, out, errOut, tty, resize)
}

// PortForward connects stream to port on the host's loopback: every sandbox
// shares the host network.
func (d *driver) PortForward(ctx context.Context, _ string, port int32, stream io.ReadWriteCloser) error {
	return streaming.ForwardLocalPort(ctx, port, stream)
}

// ContainerUsage returns a running container's CPU and memory usage from its
// cgroup; nil, nil for a container that does not run or has no cgroup.
func (d *driver) ContainerUsage(id string) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, error) {
	d.mu.Lock()
	p := d.procs[id]
	d.mu.Unlock()
	if p == nil || p.cgroup == nil {
		return nil, nil, nil
	}
	return p.cgroup.usage()
}
