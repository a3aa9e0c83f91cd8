// Package process is skiff's built-in CRI runtime that runs each container's
// command as a real host process: real exit codes, restarts, logs in CRI log
// format, exec, volumes and resource limits, without images.
//
// What a container gets:
//   - argv: config.Command followed by config.Args (the kubelet has already
//     resolved the pod's command/args); with neither, CreateContainer fails
//     with InvalidArgument, because an image's entrypoint cannot be run;
//   - a start through the container init (containerinit.go: the runtime's
//     binary re-executed, as runc's "runc init"), which joins the container's
//     cgroups, makes its mounts in a new mount namespace, sets oom_score_adj,
//     switches to run_as_user/run_as_group/supplemental_groups, sets
//     no_new_privs, and execs the command — so it never runs unlimited;
//   - mounts (config.Mounts): bind mounts in its own mount namespace, a slave
//     of the host's, so nothing reaches the host (see setupMounts for
//     mount paths missing on the host); this needs root;
//   - a cgroup <pod cgroup>/<container ID> with config.Linux.Resources, the
//     pod cgroup being the sandbox's cgroup_parent or
//     /skiff/kubepods/pod<sandbox ID>; an OOM kill in it makes the exit reason
//     "OOMKilled"; it is removed once the container has exited;
//   - the program is looked up in the container's PATH (from config.Envs, else
//     the runtime's own PATH) inside its mount namespace; the environment is
//     PATH, HOME (the runtime's), HOSTNAME (the sandbox's) and then
//     config.Envs, later entries winning;
//   - the working directory is config.WorkingDir if it is an existing
//     directory (absolute path), else the sandbox's directory
//     <rootDir>/sandboxes/<sandbox ID>;
//   - stdin is /dev/null; stdout and stderr go to the log file in CRI format;
//   - CRI Exec and ExecSync run a command like the container's own (same
//     mount namespace, cgroup, user, environment, working directory and PATH
//     lookup), Exec with stdin, a TTY (resizable) and its exit code; Attach
//     streams the container's output from the moment of attaching;
//     PortForward connects to the port on the host's loopback; the URLs they
//     return are served on a loopback port (StreamingAddr);
//   - it runs in its own process group, on the host network, PID and IPC
//     namespaces; what it cannot honour (privileged, capabilities, seccomp,
//     ...: see refuseUnsupported) is refused at CreateContainer;
//   - when its main process exits, the rest of its process group and of its
//     cgroup is killed, as a container's processes end with its init process.
//
// Every sandbox reports the same pod IP: the host's first non-loopback IPv4
// address (127.0.0.1 if it has none), since all containers share the host's
// network as hostNetwork pods do.
//
// State is in memory. Started processes receive SIGKILL if the runtime's
// process dies (they could not be adopted by a new runtime), and Close kills
// them all.
package process

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"skiff.dev/services/cri/criservice"
)

// RuntimeName is what Version reports as the runtime name.
const RuntimeName = "skiff-process"

// StreamingAddr is where the URLs of Exec, Attach and PortForward are served:
// a random loopback port, as containerd's stream server does by default.
const StreamingAddr = "127.0.0.1:0"

// Runtime is the process CRI runtime. It implements
// runtimeapi.RuntimeServiceServer and runtimeapi.ImageServiceServer through
// the embedded criservice.Service; serve it with runtime.Serve.
type Runtime struct {
	*criservice.Service
}

// sandboxDirName matches the sandbox directories a Runtime creates.
var sandboxDirName = regexp.MustCompile(`^[0-9a-f]{64}$`)

// New returns a Runtime keeping per-sandbox directories under
// rootDir/sandboxes (created if missing). Sandbox directories left there by an
// earlier runtime are removed: state is in memory, so they cannot be adopted.
// ImageFsInfo reports the filesystem of rootDir.
func New(rootDir string) (*Runtime, error) {
	root, err := filepath.Abs(rootDir)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	sandboxes := filepath.Join(root, "sandboxes")
	if err := os.MkdirAll(sandboxes, 0o755); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	entries, err := os.ReadDir(sandboxes)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && sandboxDirName.MatchString(e.Name()) {
			if err := os.RemoveAll(filepath.Join(sandboxes, e.Name())); err != nil {
				return nil, fmt.Errorf("process runtime: remove stale sandbox directory: %w", err)
			}
		}
	}
	staging := filepath.Join(root, "staging")
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	d := newDriver(sandboxes, staging, hostIPv4(), probeCgroups())
	svc := criservice.New(RuntimeName, d, criservice.WithFilesystem(root))
	if err := svc.StartStreaming(StreamingAddr); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	return &Runtime{Service: svc}, nil
}

// Close kills every process the runtime started (each container's and each
// ExecSync's whole process group, with SIGKILL) and waits until they have
// been reaped and their output written. Afterwards no process the runtime
// started is left, except one that moved itself out of its process group
// (setsid, setpgid). Close is idempotent.
func (r *Runtime) Close() { r.Service.Close() }
