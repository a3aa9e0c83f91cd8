// Package e2e starts the real skiff binary (the one `make run` starts) and drives it the
// way a user does: with the real /usr/bin/kubectl and with client-go.
package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/tests/internal/skifftest"
)

// skiffBinary is built once by TestMain.
var skiffBinary string

func TestMain(m *testing.M) { skifftest.Main(m, &skiffBinary) }

// cluster is one running skiff process, with a kubectl cache directory of its own.
type cluster struct {
	*skifftest.Cluster
	t        *testing.T
	cacheDir string
}

// startSkiff runs the skiff binary with the given runtime on free ports (node name
// e2e-RUNTIME) and stops it (SIGINT, as Ctrl-C does) when the test ends, failing the
// test if it does not exit cleanly. extraArgs are added to skiff's flags.
func startSkiff(t *testing.T, runtime string, extraArgs ...string) *cluster {
	t.Helper()
	c := skifftest.Start(t, skiffBinary, append([]string{"--runtime", runtime, "--node-name", "e2e-" + runtime}, extraArgs...)...)
	return &cluster{Cluster: c, t: t, cacheDir: t.TempDir()}
}

// kubectl runs the real kubectl against the cluster and returns its combined output and
// error (an *exec.ExitError when kubectl exits non-zero).
func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectlPath(c.t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+c.cacheDir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustKubectl is kubectl that fails the test on a non-zero exit.
func (c *cluster) mustKubectl(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(ctx, args...)
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlPath(t *testing.T) string {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("the end-to-end suite drives the real kubectl, which is not on PATH: %v", err)
	}
	return path
}

// eventually polls cond every 200 ms until it returns true or timeout passes, then fails
// with the last explanation cond gave.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var why string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, why = cond()
		return ok, nil
	}); err != nil {
		t.Fatalf("condition not met within %s: %s", timeout, why)
	}
}

func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	if len(pod.Status.ContainerStatuses) == 0 {
		return nil
	}
	return &pod.Status.ContainerStatuses[0]
}

// processRunning reports whether a host process's command line contains marker.
func processRunning(marker string) bool {
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	return strings.TrimSpace(string(out)) != ""
}
