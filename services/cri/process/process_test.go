package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
)

const waitTimeout = 20 * time.Second

// env is one process runtime served over a real socket.
type env struct {
	t       *testing.T
	rt      *process.Runtime
	root    string
	c       *socketharness.Clients
	ctx     context.Context
	counter int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	rt, err := process.New(root)
	if err != nil {
		t.Fatal(err)
	}
	c := socketharness.Start(t, rt, rt)
	t.Cleanup(rt.Close) // runs before the server stops
	return &env{t: t, rt: rt, root: root, c: c, ctx: context.Background()}
}

// sandbox runs a pod sandbox the way the kubelet does and returns its ID and config.
func (e *env) sandbox(labels map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	e.counter++
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d", e.counter), Namespace: "default", Uid: fmt.Sprintf("uid-%d", e.counter)},
		Hostname:     fmt.Sprintf("pod-%d", e.counter),
		LogDirectory: filepath.Join(e.t.TempDir(), "pods", fmt.Sprintf("default_pod-%d", e.counter)),
		Labels:       labels,
	}
	resp, err := e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.PodSandboxId, cfg
}

// create pulls busybox and creates a container running argv in the sandbox.
func (e *env) create(sbID string, sbCfg *runtimeapi.PodSandboxConfig, name string, argv []string, edit ...func(*runtimeapi.ContainerConfig)) string {
	e.t.Helper()
	id, err := e.tryCreate(sbID, sbCfg, name, argv, edit...)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) tryCreate(sbID string, sbCfg *runtimeapi.PodSandboxConfig, name string, argv []string, edit ...func(*runtimeapi.ContainerConfig)) (string, error) {
	pulled, err := e.c.Image.PullImage(e.ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: pulled.ImageRef, UserSpecifiedImage: "busybox"},
		Command:  argv,
		LogPath:  name + "/0.log",
	}
	for _, f := range edit {
		f(cfg)
	}
	resp, err := e.c.Runtime.CreateContainer(e.ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sbID, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		return "", err
	}
	return resp.ContainerId, nil
}

func (e *env) start(id string) {
	e.t.Helper()
	if _, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) status(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	resp, err := e.c.Runtime.ContainerStatus(e.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Status
}

// waitExited polls until the container is EXITED and returns its status.
func (e *env) waitExited(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	var st *runtimeapi.ContainerStatus
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		st = e.status(id)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, nil
	}); err != nil {
		e.t.Fatalf("container %s still %s", id, st.State)
	}
	return st
}

// logLines returns the container's log as "stream tag content" strings.
func logLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for line := range bytes.Lines(data) {
		entry, err := criolog.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %s", entry.Stream, entry.Tag, entry.Content))
	}
	return out
}

// waitLog polls until the log holds want and returns the log.
func waitLog(t *testing.T, path, want string) []string {
	t.Helper()
	var lines []string
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		lines = logLines(t, path)
		return slices.Contains(lines, want), nil
	}); err != nil {
		t.Fatalf("log %s never held %q; it holds %q", path, want, lines)
	}
	return lines
}

// pidFromLog waits for the container to print a pid as its first line.
func pidFromLog(t *testing.T, path string) int {
	t.Helper()
	var lines []string
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		lines = logLines(t, path)
		return len(lines) > 0, nil
	}); err != nil {
		t.Fatalf("container never logged its pid to %s", path)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(lines[0], "stdout F "))
	if err != nil {
		t.Fatalf("first log line %q is not a pid", lines[0])
	}
	return pid
}

// gone reports whether pid no longer runs: kill(pid, 0) fails with ESRCH, or
// it is a zombie waiting for a parent (not us) to reap it.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return gone(pid), nil
	}); err != nil {
		t.Fatalf("process %d still runs", pid)
	}
}

func TestVersionAndStatus(t *testing.T) {
	e := newEnv(t)
	v, err := e.c.Runtime.Version(e.ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "skiff-process" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion != "0.1.0" {
		t.Errorf("Version = %v", v)
	}
	st, err := e.c.Runtime.Status(e.ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		if !slices.ContainsFunc(st.Status.Conditions, func(c *runtimeapi.RuntimeCondition) bool { return c.Type == cond && c.Status }) {
			t.Errorf("condition %s is not true in %v", cond, st.Status.Conditions)
		}
	}
}

func TestContainerRunsToExit(t *testing.T) {
	workDir := t.TempDir()
	for _, tc := range []struct {
		name       string
		argv       []string
		edit       func(*runtimeapi.ContainerConfig)
		wantCode   int32
		wantReason string
		wantLog    []string
	}{
		{
			name: "exit code and stdout", argv: []string{"sh", "-c", "echo hello; exit 3"},
			wantCode: 3, wantReason: "Error", wantLog: []string{"stdout F hello"},
		},
		{
			name: "stderr lines are tagged stderr", argv: []string{"sh", "-c", "echo oops >&2"},
			wantCode: 0, wantReason: "Completed", wantLog: []string{"stderr F oops"},
		},
		{
			name: "args follow command", argv: []string{"echo"},
			edit:     func(c *runtimeapi.ContainerConfig) { c.Args = []string{"from", "args"} },
			wantCode: 0, wantReason: "Completed", wantLog: []string{"stdout F from args"},
		},
		{
			name: "env, working dir and hostname", argv: []string{"sh", "-c", `echo "$GREETING $(pwd) $HOSTNAME"`},
			edit: func(c *runtimeapi.ContainerConfig) {
				c.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi")}}
				c.WorkingDir = workDir
			},
			wantCode: 0, wantReason: "Completed", wantLog: []string{"stdout F hi " + workDir + " pod-1"},
		},
		{
			name: "unterminated output is a partial line", argv: []string{"printf", "no newline"},
			wantCode: 0, wantReason: "Completed", wantLog: []string{"stdout P no newline"},
		},
		{
			name: "killed by a signal is 128+signal", argv: []string{"sh", "-c", "kill -9 $$"},
			wantCode: 137, wantReason: "Error",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sbID, sbCfg := e.sandbox(nil)
			var edits []func(*runtimeapi.ContainerConfig)
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			id := e.create(sbID, sbCfg, "main", tc.argv, edits...)
			if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				t.Fatalf("after create: state %s, want CREATED", st.State)
			}
			e.start(id)
			st := e.waitExited(id)
			if st.ExitCode != tc.wantCode || st.Reason != tc.wantReason {
				t.Errorf("exit code %d reason %q, want %d %q", st.ExitCode, st.Reason, tc.wantCode, tc.wantReason)
			}
			if st.StartedAt == 0 || st.FinishedAt < st.StartedAt || st.StartedAt < st.CreatedAt {
				t.Errorf("times created %d started %d finished %d are not in order", st.CreatedAt, st.StartedAt, st.FinishedAt)
			}
			if want := filepath.Join(sbCfg.LogDirectory, "main/0.log"); st.LogPath != want {
				t.Errorf("LogPath %q, want %q", st.LogPath, want)
			}
			if st.Image.GetImage() != "docker.io/library/busybox:latest" || st.Image.GetUserSpecifiedImage() != "busybox" || st.ImageRef == "" {
				t.Errorf("image %v ref %q", st.Image, st.ImageRef)
			}
			if got := logLines(t, st.LogPath); !slices.Equal(got, tc.wantLog) {
				t.Errorf("log = %q, want %q", got, tc.wantLog)
			}
		})
	}
}

func TestStopContainer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		timeout  int64
		wantCode int32
	}{
		{"SIGTERM ends a process within the timeout", "echo ready; exec sleep 1000", 60, 128 + int32(syscall.SIGTERM)},
		{"SIGKILL after the timeout when TERM is ignored", `trap "" TERM; echo ready; sleep 1000`, 1, 128 + int32(syscall.SIGKILL)},
		{"timeout 0 kills at once", "echo ready; exec sleep 1000", 0, 128 + int32(syscall.SIGKILL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sbID, sbCfg := e.sandbox(nil)
			id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", tc.script})
			e.start(id)
			st := e.status(id)
			if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
				t.Fatalf("after start: state %s startedAt %d, want RUNNING", st.State, st.StartedAt)
			}
			waitLog(t, st.LogPath, "stdout F ready") // the trap is set
			if _, err := e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: tc.timeout}); err != nil {
				t.Fatal(err)
			}
			// StopContainer returns once the container has exited.
			st = e.status(id)
			if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != tc.wantCode || st.Reason != "Error" {
				t.Errorf("after stop: state %s exit code %d reason %q, want EXITED %d Error", st.State, st.ExitCode, st.Reason, tc.wantCode)
			}
			// Stopping again is not an error.
			if _, err := e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: tc.timeout}); err != nil {
				t.Errorf("second stop: %v", err)
			}
		})
	}
}

func TestCreateWithoutCommandIsInvalidArgument(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	_, err := e.tryCreate(sbID, sbCfg, "main", nil)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateContainer without command: %v, want InvalidArgument", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "no command") || !strings.Contains(msg, "cannot run images") {
		t.Errorf("message %q does not say the runtime needs a command", msg)
	}
}

func TestMissingExecutableIsStartError(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"no-such-program-skiff"})
	_, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	if err == nil {
		t.Fatal("StartContainer of a missing program succeeded")
	}
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 128 || st.Reason != "StartError" ||
		!strings.Contains(st.Message, "executable file not found") {
		t.Errorf("status %s %d %q %q, want EXITED 128 StartError with the lookup error", st.State, st.ExitCode, st.Reason, st.Message)
	}
}

func TestDefaultWorkingDirIsTheSandboxDirAndIsRemovedWithIt(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "pwd; exec sleep 1000"})
	e.start(id)
	sbDir := filepath.Join(e.root, "sandboxes", sbID)
	waitLog(t, e.status(id).LogPath, "stdout F "+sbDir)

	if _, err := e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sbID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sbDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after remove: %v, want it gone", err)
	}
}

func TestSandboxNetworkIsTheHostIPv4(t *testing.T) {
	e := newEnv(t)
	sbID, _ := e.sandbox(nil)
	resp, err := e.c.Runtime.PodSandboxStatus(e.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbID})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(resp.Status.GetNetwork().GetIp())
	if err != nil || !ip.Is4() {
		t.Fatalf("pod IP %q is not an IPv4 address", resp.Status.GetNetwork().GetIp())
	}
	if resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("state %s, want READY", resp.Status.State)
	}
}

func TestStopAndRemovePodSandboxEndItsProcesses(t *testing.T) {
	for _, rpc := range []string{"StopPodSandbox", "RemovePodSandbox"} {
		t.Run(rpc, func(t *testing.T) {
			e := newEnv(t)
			sbID, sbCfg := e.sandbox(nil)
			id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "echo $$; exec sleep 1000"})
			e.start(id)
			pid := pidFromLog(t, e.status(id).LogPath)

			var err error
			if rpc == "StopPodSandbox" {
				_, err = e.c.Runtime.StopPodSandbox(e.ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sbID})
			} else {
				_, err = e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sbID})
			}
			if err != nil {
				t.Fatal(err)
			}
			waitGone(t, pid)
			list, err := e.c.Runtime.ListContainers(e.ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if rpc == "RemovePodSandbox" {
				if len(list.Containers) != 0 {
					t.Errorf("containers left after RemovePodSandbox: %v", list.Containers)
				}
				return
			}
			if len(list.Containers) != 1 || list.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
				t.Errorf("containers after StopPodSandbox: %v, want one EXITED", list.Containers)
			}
			sb, err := e.c.Runtime.PodSandboxStatus(e.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbID})
			if err != nil {
				t.Fatal(err)
			}
			if sb.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("sandbox state %s, want NOTREADY", sb.Status.State)
			}
		})
	}
}

func TestCloseLeavesNoProcessRunning(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	scripts := map[string]string{
		"plain":      "echo $$; exec sleep 1000",
		"trapping":   `trap "" TERM; echo $$; sleep 1000`,
		"background": "sleep 1000 & echo $!; wait",
	}
	var pids []int
	for name, script := range scripts {
		id := e.create(sbID, sbCfg, name, []string{"sh", "-c", script})
		e.start(id)
		pids = append(pids, pidFromLog(t, e.status(id).LogPath))
	}
	// An ExecSync in flight is ended too.
	execID := e.create(sbID, sbCfg, "exec-target", []string{"sleep", "1000"})
	e.start(execID)
	execDone := make(chan error, 1)
	go func() {
		_, err := e.c.Runtime.ExecSync(e.ctx, &runtimeapi.ExecSyncRequest{ContainerId: execID, Cmd: []string{"sleep", "1000"}})
		execDone <- err
	}()

	e.rt.Close()
	for _, pid := range pids {
		waitGone(t, pid) // a SIGKILLed grandchild dies a moment after kill returns
	}
	<-execDone
	list, err := e.c.Runtime.ListContainers(e.ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s is %s after Close, want EXITED", c.Metadata.Name, c.State)
		}
	}
}

func TestExecSync(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"sleep", "1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi")}}
	})
	e.start(id)

	for _, tc := range []struct {
		name                string
		cmd                 []string
		timeout             int64
		wantCode            codes.Code
		wantStdout, wantErr string
		wantExit            int32
	}{
		{name: "output and exit code", cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 4"},
			wantStdout: "out\n", wantErr: "err\n", wantExit: 4},
		{name: "container env", cmd: []string{"sh", "-c", "echo $GREETING"}, wantStdout: "hi\n"},
		{name: "timeout", cmd: []string{"sleep", "1000"}, timeout: 1, wantCode: codes.DeadlineExceeded},
		{name: "empty command", cmd: nil, wantCode: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.c.Runtime.ExecSync(e.ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: tc.cmd, Timeout: tc.timeout})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("ExecSync: %v, want code %s", err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if string(resp.Stdout) != tc.wantStdout || string(resp.Stderr) != tc.wantErr || resp.ExitCode != tc.wantExit {
				t.Errorf("got stdout %q stderr %q exit %d, want %q %q %d", resp.Stdout, resp.Stderr, resp.ExitCode, tc.wantStdout, tc.wantErr, tc.wantExit)
			}
		})
	}

	if _, err := e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.Runtime.ExecSync(e.ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ExecSync in an exited container: %v, want FailedPrecondition", err)
	}
}

func TestReopenContainerLogAfterRotation(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	flag := filepath.Join(t.TempDir(), "go-on")
	script := fmt.Sprintf("echo one; while [ ! -e %s ]; do sleep 0.01; done; echo two; exec sleep 1000", flag)
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", script})
	e.start(id)
	path := e.status(id).LogPath
	waitLog(t, path, "stdout F one")

	if err := os.Rename(path, path+".rotated"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Runtime.ReopenContainerLog(e.ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := waitLog(t, path, "stdout F two"); len(got) != 1 {
		t.Errorf("new log = %q, want only the line after rotation", got)
	}
}
