package process_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"golang.org/x/sys/unix"
)

// needRoot skips a test of mount namespaces or cgroups: only root can make them.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces and cgroups need root")
	}
}

// hostMounts returns the mount points the host's mount table lists.
func hostMounts(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (e *env) execSync(id string, argv ...string) *runtimeapi.ExecSyncResponse {
	e.t.Helper()
	resp, err := e.c.Runtime.ExecSync(e.ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: argv, Timeout: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

func (e *env) stopAndRemove(id string) {
	e.t.Helper()
	if _, err := e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.Runtime.RemoveContainer(e.ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatal(err)
	}
}

func TestMountsAppearOnlyInsideTheContainer(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)

	volume := t.TempDir()
	if err := os.WriteFile(filepath.Join(volume, "game.properties"), []byte("lives=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostsFile, []byte("10.0.0.1 skiff-test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Targets that do not exist on the host: under / (shadowing /), under
	// /etc (shadowing /etc), a file, and one nested in a read-write mount
	// (made in the volume, as runc makes it).
	top := "/skiff-test-" + filepath.Base(t.TempDir())
	etcDir := "/etc/skiff-test-" + filepath.Base(t.TempDir())
	// Under the temporary directory, which holds the runtime's own
	// directory, where shadows are assembled.
	tmpTarget := filepath.Join(os.TempDir(), "skiff-test-"+filepath.Base(t.TempDir()))
	// Where the kubelet mounts a termination log and a service account
	// token (/var/run is a link to /run on many hosts).
	devTarget := "/dev/skiff-test-termination-log-" + filepath.Base(t.TempDir())
	tokenTarget := "/var/run/secrets/skiff-test-" + filepath.Base(t.TempDir()) + "/serviceaccount"
	mounts := []*runtimeapi.Mount{
		{HostPath: hostsFile, ContainerPath: devTarget},
		{HostPath: volume, ContainerPath: tokenTarget, Readonly: true},
		{HostPath: volume, ContainerPath: tmpTarget},
		{HostPath: volume, ContainerPath: top + "/config"},
		{HostPath: volume, ContainerPath: etcDir, Readonly: true},
		{HostPath: hostsFile, ContainerPath: etcDir + "-hosts"},
		{HostPath: volume, ContainerPath: top + "/config/nested/deeper", Readonly: true},
	}
	script := strings.Join([]string{
		"cat " + top + "/config/game.properties",
		"cat " + etcDir + "-hosts",
		"cat " + tmpTarget + "/game.properties",
		"cat " + tokenTarget + "/game.properties",
		"cat " + devTarget,
		"echo x > /dev/null && test -c /dev/null && echo host-dev-intact",
		"test -s /etc/passwd && echo host-etc-intact",
		"touch " + top + "/config/written && echo rw-writable",
		"touch " + etcDir + "/denied 2>/dev/null || echo ro-refused",
		"touch " + top + "/config/nested/deeper/denied 2>/dev/null || echo nested-ro-refused",
		"exec sleep 1000",
	}, "; ")
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", script}, func(c *runtimeapi.ContainerConfig) {
		c.Mounts = mounts
	})
	e.start(id)
	logPath := e.status(id).LogPath
	lines := waitLog(t, logPath, "stdout F nested-ro-refused")
	if n := strings.Count(strings.Join(lines, "\n"), "stdout F lives=3"); n != 3 {
		t.Errorf("the volume's file was read %d times, want 3: %q", n, lines)
	}
	if n := strings.Count(strings.Join(lines, "\n"), "stdout F 10.0.0.1 skiff-test"); n != 2 {
		t.Errorf("the file mounts were read %d times, want 2: %q", n, lines)
	}
	for _, want := range []string{"stdout F host-dev-intact", "stdout F host-etc-intact",
		"stdout F rw-writable", "stdout F ro-refused"} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("container log lacks %q: %q", want, lines)
		}
	}
	for _, p := range []string{"written", "nested/deeper"} {
		if _, err := os.Stat(filepath.Join(volume, p)); err != nil {
			t.Errorf("%s did not reach the volume's host directory: %v", p, err)
		}
	}

	// The host sees none of it, even while the container runs.
	for _, p := range []string{top, etcDir, etcDir + "-hosts", tmpTarget, devTarget, filepath.Dir(tokenTarget)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists on the host (%v)", p, err)
		}
		if strings.Contains(hostMounts(t), " "+p) {
			t.Errorf("%s is mounted on the host", p)
		}
	}

	// Exec enters the container's mount namespace.
	if resp := e.execSync(id, "cat", top+"/config/game.properties"); string(resp.Stdout) != "lives=3\n" || resp.ExitCode != 0 {
		t.Errorf("exec cat: stdout %q stderr %q exit %d", resp.Stdout, resp.Stderr, resp.ExitCode)
	}
	if resp := e.execSync(id, "sh", "-c", "echo x > "+etcDir+"/denied"); resp.ExitCode == 0 {
		t.Errorf("exec wrote to a read-only mount")
	}
	for _, tty := range []bool{false, true} {
		out, _, err := e.execStreams(t, "spdy", id, []string{"cat", top + "/config/game.properties"}, nil, tty)
		if err != nil || !strings.Contains(out, "lives=3") {
			t.Errorf("streaming exec (tty %v): %q, %v, want lives=3", tty, out, err)
		}
	}
	_, errOut, err := e.execStreams(t, "spdy", id, []string{"no-such-command"}, nil, false)
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 127 || !strings.Contains(errOut, "executable file not found") {
		t.Errorf("streaming exec of a missing command: stderr %q, %v; want exit code 127 and the lookup error", errOut, err)
	}

	e.stopAndRemove(id)
	for _, p := range []string{top, etcDir} {
		if strings.Contains(hostMounts(t), " "+p) {
			t.Errorf("%s is mounted on the host after the container ended", p)
		}
	}
}

func TestMountRefusals(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		mount *runtimeapi.Mount
		want  string
	}{
		{"relative container path", &runtimeapi.Mount{HostPath: dir, ContainerPath: "data"}, "absolute"},
		{"bidirectional propagation", &runtimeapi.Mount{HostPath: dir, ContainerPath: "/data", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}, "Bidirectional"},
		{"image volume", &runtimeapi.Mount{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "busybox"}}, "image volumes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.tryCreate(sbID, sbCfg, strings.ReplaceAll(tc.name, " ", "-"), []string{"true"}, func(c *runtimeapi.ContainerConfig) {
				c.Mounts = []*runtimeapi.Mount{tc.mount}
			})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CreateContainer: %v, want InvalidArgument mentioning %q", err, tc.want)
			}
		})
	}
}

func TestAMountThatCannotBeMadeIsAStartError(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory cannot be bound onto the existing file /etc/passwd.
	id := e.create(sbID, sbCfg, "main", []string{"true"}, func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/etc/passwd"}}
	})
	if _, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
		t.Fatal("StartContainer succeeded")
	}
	st := e.status(id)
	if st.Reason != "StartError" || !strings.Contains(st.Message, "/etc/passwd") {
		t.Errorf("status %s %q %q, want StartError naming /etc/passwd", st.State, st.Reason, st.Message)
	}
}

// cgroupOf returns pid's cgroup directory in the v1 hierarchy of controller.
func cgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return filepath.Join("/sys/fs/cgroup", controller, parts[2])
			}
		}
	}
	t.Fatalf("process %d is in no %s cgroup", pid, controller)
	return ""
}

// needCgroupV1 skips a test reading v1 cgroup files on a host without them.
func needCgroupV1(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skip("the test reads cgroup v1 files; this host has no v1 memory hierarchy")
	}
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestResourcesAreAppliedThroughCgroups(t *testing.T) {
	needCgroupV1(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "echo $$; exec sleep 1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20,
		}}
	})
	e.start(id)
	pid := pidFromLog(t, e.status(id).LogPath)
	cpu, mem := cgroupOf(t, pid, "cpu"), cgroupOf(t, pid, "memory")
	if !strings.HasSuffix(cpu, "/pod"+sbID+"/"+id) || !strings.HasSuffix(mem, "/pod"+sbID+"/"+id) {
		t.Errorf("container cgroups %s, %s; want .../pod<sandbox ID>/<container ID>", cpu, mem)
	}
	for file, want := range map[string]string{
		filepath.Join(cpu, "cpu.cfs_quota_us"):      "50000",
		filepath.Join(cpu, "cpu.cfs_period_us"):     "100000",
		filepath.Join(cpu, "cpu.shares"):            "512",
		filepath.Join(mem, "memory.limit_in_bytes"): fmt.Sprint(64 << 20),
	} {
		if got := readTrimmed(t, file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}

	// Exec runs in the container's cgroup, and UpdateContainerResources
	// reaches it.
	resp := e.execSync(id, "cat", "/proc/self/cgroup")
	if !strings.Contains(string(resp.Stdout), "/pod"+sbID+"/"+id) {
		t.Errorf("exec runs outside the container's cgroup:\n%s", resp.Stdout)
	}
	if _, err := e.c.Runtime.UpdateContainerResources(e.ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 512, MemoryLimitInBytes: 96 << 20}}); err != nil {
		t.Fatal(err)
	}
	if got := readTrimmed(t, filepath.Join(cpu, "cpu.cfs_quota_us")); got != "20000" {
		t.Errorf("cpu.cfs_quota_us after update = %s, want 20000", got)
	}
	if got := readTrimmed(t, filepath.Join(mem, "memory.limit_in_bytes")); got != fmt.Sprint(96<<20) {
		t.Errorf("memory.limit_in_bytes after update = %s, want %d", got, 96<<20)
	}

	e.stopAndRemove(id)
	waitGone(t, pid)
	for _, dir := range []string{cpu, mem} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("container cgroup %s is left after removal (%v)", dir, err)
		}
	}
	if _, err := e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sbID}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(cpu), filepath.Dir(mem)} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("pod cgroup %s is left after the sandbox's removal (%v)", dir, err)
		}
	}
}

func TestCgroupParentIsThePodCgroup(t *testing.T) {
	needCgroupV1(t)
	e := newEnv(t)
	parent := "/skiff-test/kubepods/burstable/pod" + filepath.Base(t.TempDir())
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u"},
		LogDirectory: t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
	}
	sb, err := e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := e.create(sb.PodSandboxId, cfg, "main", []string{"sh", "-c", "echo $$; exec sleep 1000"})
	e.start(id)
	pid := pidFromLog(t, e.status(id).LogPath)
	if got, want := cgroupOf(t, pid, "memory"), filepath.Join("/sys/fs/cgroup/memory", parent, id); got != want {
		t.Errorf("memory cgroup %s, want %s", got, want)
	}
	if _, err := e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", parent)); !os.IsNotExist(err) {
		t.Errorf("pod cgroup left after the sandbox's removal (%v)", err)
	}
	// The levels above the pod are the kubelet's; this test made them.
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for d := filepath.Dir(parent); d != "/"; d = filepath.Dir(d) {
		for _, h := range hierarchies {
			_ = os.Remove(filepath.Join(h, d))
		}
	}

	_, err = e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "q", Namespace: "default", Uid: "v"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods-burstable-podv.slice"},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cgroupfs") {
		t.Errorf("RunPodSandbox with a systemd slice: %v, want InvalidArgument naming the cgroupfs driver", err)
	}
}

func TestContainerPastItsMemoryLimitIsOOMKilled(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	// tail buffers its endless, newline-free input until the limit is hit.
	id := e.create(sbID, sbCfg, "main", []string{"tail", "/dev/zero"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}}
	})
	e.start(id)
	st := e.waitExited(id)
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Errorf("exited with %d %q %q, want 137 OOMKilled", st.ExitCode, st.Reason, st.Message)
	}
}

func TestRunAsUserAndGroup(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "echo $(id -u) $(id -g) $(id -G); exec sleep 1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser:          &runtimeapi.Int64Value{Value: 1234},
			RunAsGroup:         &runtimeapi.Int64Value{Value: 5678},
			SupplementalGroups: []int64{5678, 91011},
		}}
	})
	e.start(id)
	waitLog(t, e.status(id).LogPath, "stdout F 1234 5678 5678 91011")
	if resp := e.execSync(id, "id", "-u"); string(resp.Stdout) != "1234\n" {
		t.Errorf("exec runs as %q, want 1234", resp.Stdout)
	}
	e.stopAndRemove(id)
}

func TestWhatTheRuntimeCannotHonourIsRefused(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	for _, tc := range []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want string
	}{
		{"privileged", &runtimeapi.LinuxContainerSecurityContext{Privileged: true}, "privileged"},
		{"capabilities", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}}, "capabilities"},
		{"seccomp", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, "seccomp"},
		{"apparmor", &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, "AppArmor"},
		{"user name", &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "nobody"}, "runAsUser by name"},
		{"read-only root", &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}, "readOnlyRootFilesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.tryCreate(sbID, sbCfg, strings.ReplaceAll(tc.name, " ", "-"), []string{"true"}, func(c *runtimeapi.ContainerConfig) {
				c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: tc.sc}
			})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CreateContainer: %v, want InvalidArgument mentioning %q", err, tc.want)
			}
		})
	}
	_, err := e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "sysctl", Namespace: "default", Uid: "s"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"net.core.somaxconn": "1024"}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sysctls") {
		t.Errorf("RunPodSandbox with sysctls: %v, want InvalidArgument mentioning sysctls", err)
	}
}

func TestContainerStatsComeFromTheCgroup(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	// A shell that burns CPU and keeps a few MiB in a variable.
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "x=$(head -c 4000000 /dev/zero | tr '\\0' a); i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo ready; sleep 1000"},
		func(c *runtimeapi.ContainerConfig) { c.Labels = map[string]string{"app": "stats"} })
	e.start(id)
	waitLog(t, e.status(id).LogPath, "stdout F ready")
	resp, err := e.c.Runtime.ListContainerStats(e.ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "stats"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Stats) != 1 || resp.Stats[0].Attributes.Id != id {
		t.Fatalf("ListContainerStats = %v, want the one container", resp.Stats)
	}
	st := resp.Stats[0]
	if st.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Errorf("cpu usage %v, want some", st.GetCpu())
	}
	if ws := st.GetMemory().GetWorkingSetBytes().GetValue(); ws == 0 {
		t.Errorf("memory working set %d, want some", ws)
	}
	e.stopAndRemove(id)
}

func TestHostToContainerPropagation(t *testing.T) {
	needRoot(t)
	// The volume is a shared mount on the host, as the kubelet makes its
	// root directory for HostToContainer volumes.
	volume := t.TempDir()
	for _, args := range [][]string{{"tmpfs", volume, "tmpfs"}, {"", volume, ""}} {
		flags := uintptr(0)
		if args[0] == "" {
			flags = unix.MS_SHARED
		}
		if err := unix.Mount(args[0], args[1], args[2], flags, ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(volume, unix.MNT_DETACH) })
	if err := os.Mkdir(filepath.Join(volume, "later"), 0o755); err != nil {
		t.Fatal(err)
	}

	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	mounts := []*runtimeapi.Mount{
		{HostPath: volume, ContainerPath: "/skiff-test-h2c", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: volume, ContainerPath: "/skiff-test-private"},
	}
	id := e.create(sbID, sbCfg, "main", []string{"sleep", "1000"}, func(c *runtimeapi.ContainerConfig) { c.Mounts = mounts })
	e.start(id)

	// Mounted on the host after the start: seen through HostToContainer only.
	later := filepath.Join(volume, "later")
	if err := unix.Mount("tmpfs", later, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(later, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(later, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if resp := e.execSync(id, "cat", "/skiff-test-h2c/later/hello"); string(resp.Stdout) != "from the host\n" {
		t.Errorf("HostToContainer: the host's later mount is not seen: stdout %q stderr %q", resp.Stdout, resp.Stderr)
	}
	if resp := e.execSync(id, "cat", "/skiff-test-private/later/hello"); resp.ExitCode == 0 {
		t.Errorf("None: the host's later mount is seen: %q", resp.Stdout)
	}
	e.stopAndRemove(id)
}

func TestMaskedAndReadOnlyPaths(t *testing.T) {
	needRoot(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	// The kubelet's defaults for procMount Default, in part.
	id := e.create(sbID, sbCfg, "main", []string{"sleep", "1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			MaskedPaths:   []string{"/proc/kcore", "/sys/firmware", "/proc/no-such-path"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"},
		}}
	})
	e.start(id)
	for _, tc := range []struct {
		name string
		cmd  string
	}{
		{"a masked file reads as empty", "test ! -s /proc/kcore || { ls -l /proc/kcore; exit 1; }"},
		{"a masked directory is empty", "test -d /sys/firmware && test -z \"$(ls -A /sys/firmware)\""},
		{"a read-only path cannot be written", "! (echo 0 > /proc/sys/kernel/printk_ratelimit) 2>/dev/null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := e.execSync(id, "sh", "-c", tc.cmd); resp.ExitCode != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q", resp.ExitCode, resp.Stdout, resp.Stderr)
			}
		})
	}
	// The host's own view is untouched.
	if entries, err := os.ReadDir("/sys/firmware"); err != nil || len(entries) == 0 {
		t.Errorf("/sys/firmware is masked on the host (%d entries, %v)", len(entries), err)
	}
	e.stopAndRemove(id)
}

func TestAPodCgroupSharedByTwoSandboxesOutlivesTheFirst(t *testing.T) {
	needCgroupV1(t)
	e := newEnv(t)
	parent := "/skiff-test-shared/pod" + filepath.Base(t.TempDir())
	t.Cleanup(func() {
		hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, h := range hierarchies {
			_ = os.Remove(filepath.Join(h, parent))
			_ = os.Remove(filepath.Join(h, filepath.Dir(parent)))
		}
	})
	run := func(attempt uint32) (string, *runtimeapi.PodSandboxConfig) {
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u", Attempt: attempt},
			LogDirectory: t.TempDir(),
			Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
		}
		sb, err := e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return sb.PodSandboxId, cfg
	}
	first, _ := run(0)
	second, cfg := run(1)
	id := e.create(second, cfg, "main", []string{"sh", "-c", "echo $$; exec sleep 1000"})
	e.start(id)
	pid := pidFromLog(t, e.status(id).LogPath)
	// The kubelet removes the old attempt while the new one runs.
	if _, err := e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: first}); err != nil {
		t.Fatalf("removing the first sandbox: %v", err)
	}
	if got := cgroupOf(t, pid, "memory"); got != filepath.Join("/sys/fs/cgroup/memory", parent, id) {
		t.Errorf("the running container's cgroup is %s after the other sandbox's removal", got)
	}
	if _, err := e.c.Runtime.RemovePodSandbox(e.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: second}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", parent)); !os.IsNotExist(err) {
		t.Errorf("pod cgroup left after both sandboxes' removal (%v)", err)
	}
}

// TestWithoutRoot pins what a runtime that is not root does; run the
// package's test binary as another user to run it.
func TestWithoutRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("pins the behaviour without root; this runs as root")
	}
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	_, err := e.tryCreate(sbID, sbCfg, "mounts", []string{"true"}, func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data"}}
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the process runtime needs root for volume mounts") {
		t.Errorf("a container with mounts: %v, want InvalidArgument: the process runtime needs root for volume mounts", err)
	}
	_, err = e.tryCreate(sbID, sbCfg, "limits", []string{"true"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cannot enforce its resources") {
		t.Errorf("a container with a memory limit: %v, want InvalidArgument: cannot enforce its resources", err)
	}
	// A CPU request alone runs, without a cgroup.
	id := e.create(sbID, sbCfg, "shares", []string{"sh", "-c", "echo ran"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 102}}
	})
	e.start(id)
	if st := e.waitExited(id); st.ExitCode != 0 {
		t.Errorf("exited %d %q", st.ExitCode, st.Message)
	}
}

func TestResourcesUpdatedBeforeTheStartAreApplied(t *testing.T) {
	needCgroupV1(t)
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	id := e.create(sbID, sbCfg, "main", []string{"sh", "-c", "echo $$; exec sleep 1000"}, func(c *runtimeapi.ContainerConfig) {
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
	})
	if _, err := e.c.Runtime.UpdateContainerResources(e.ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}}); err != nil {
		t.Fatal(err)
	}
	e.start(id)
	pid := pidFromLog(t, e.status(id).LogPath)
	if got := readTrimmed(t, filepath.Join(cgroupOf(t, pid, "memory"), "memory.limit_in_bytes")); got != fmt.Sprint(96<<20) {
		t.Errorf("memory.limit_in_bytes = %s, want the updated %d", got, 96<<20)
	}
	if got := e.status(id).GetResources().GetLinux().GetMemoryLimitInBytes(); got != 96<<20 {
		t.Errorf("ContainerStatus reports a memory limit of %d, want %d", got, 96<<20)
	}
	e.stopAndRemove(id)
}
