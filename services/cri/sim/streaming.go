package sim

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	"skiff.dev/services/cri/criservice"
	"skiff.dev/services/cri/streaming"
)

// StreamingAddr is where the URLs of Exec, Attach and PortForward are served:
// a random loopback port, as containerd's stream server does by default.
const StreamingAddr = "127.0.0.1:0"

// Exec runs argv as a HOST process — a simulated container has nothing to run
// it in — with the runtime's PATH and HOME, the container's environment
// variables, in the system's temporary directory ("/" without one); see
// streaming.RunCommand.
func (d *driver) Exec(ctx context.Context, c *criservice.ContainerSpec, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "HOSTNAME=" + c.Sandbox.GetHostname()}
	for _, kv := range c.Config.GetEnvs() {
		env = append(env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec failed: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: execDir()}
	return streaming.RunCommand(ctx, cmd, in, out, errOut, tty, resize)
}

// execDir is where exec'd commands run: the system's temporary directory, or "/" where
// there is none (skiff's FROM-scratch kubelet image has no /tmp, and a missing working
// directory fails the exec as "fork/exec ...: no such file or directory").
func execDir() string {
	if fi, err := os.Stat(os.TempDir()); err == nil && fi.IsDir() {
		return os.TempDir()
	}
	return "/"
}

// PortForward connects stream to port on the host's loopback, where a command
// exec'd in a simulated container would listen.
func (d *driver) PortForward(ctx context.Context, _ string, port int32, stream io.ReadWriteCloser) error {
	return streaming.ForwardLocalPort(ctx, port, stream)
}
