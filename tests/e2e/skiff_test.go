// Package e2e starts the real skiff binary (the one `make run` starts) and drives it the
// way a user does: with the real /usr/bin/kubectl and with client-go.
package e2e

import (
	"bufio"
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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// skiffBinary is built once by TestMain.
var skiffBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skiff-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	skiffBinary = filepath.Join(dir, "skiff")
	build := exec.Command("go", "build", "-o", skiffBinary, "skiff.dev/services/cmd/skiff")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building skiff:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is one running skiff process.
type cluster struct {
	t          *testing.T
	cmd        *exec.Cmd
	dataDir    string
	kubeconfig string
	cacheDir   string
	client     kubernetes.Interface
	logs       *syncBuffer
	exited     chan error
}

// syncBuffer collects a child's output safely across goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startSkiff runs the skiff binary with the given runtime on free ports, reads the
// KUBECONFIG line it prints, and stops it (SIGINT, as Ctrl-C does) when the test ends,
// failing the test if it does not exit cleanly. extraArgs are added to skiff's flags.
func startSkiff(t *testing.T, runtime string, extraArgs ...string) *cluster {
	t.Helper()
	dataDir := t.TempDir()
	cmd := exec.Command(skiffBinary, append([]string{"--data-dir", dataDir, "--runtime", runtime,
		"--apiserver-port", "0", "--etcd-port", "0", "--exec-proxy-port", "0", "--kubelet-port", "0", "--nats-port", "0", "--node-name", "e2e-" + runtime}, extraArgs...)...)
	c := &cluster{t: t, cmd: cmd, dataDir: dataDir, cacheDir: t.TempDir(), logs: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = c.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { c.exited <- cmd.Wait() }()
	t.Cleanup(c.stop)

	deadline := time.After(90 * time.Second)
	for c.kubeconfig == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("skiff exited before printing KUBECONFIG; logs:\n%s", c.logs)
			}
			if strings.HasPrefix(line, "export KUBECONFIG=") {
				c.kubeconfig = strings.TrimPrefix(line, "export KUBECONFIG=")
			}
		case <-deadline:
			t.Fatalf("skiff did not print KUBECONFIG within 90s; logs:\n%s", c.logs)
		}
	}
	go func() {
		for range lines {
		}
	}()
	if !filepath.IsAbs(c.kubeconfig) {
		t.Errorf("KUBECONFIG %q is not an absolute path", c.kubeconfig)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c.client = kubernetes.NewForConfigOrDie(restConfig)
	return c
}

// stop sends SIGINT and waits up to 30 s for a clean exit.
func (c *cluster) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-c.exited:
		if err != nil {
			c.t.Errorf("skiff exited with %v after SIGINT; logs:\n%s", err, c.logs)
		}
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		c.t.Errorf("skiff did not stop within 30s of SIGINT; logs:\n%s", c.logs)
	}
	if c.t.Failed() {
		c.t.Logf("skiff logs:\n%s", c.logs)
	}
}

// kubectl runs the real kubectl against the cluster and returns its combined output and
// error (an *exec.ExitError when kubectl exits non-zero).
func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectlPath(c.t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig, "KUBECACHEDIR="+c.cacheDir)
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
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("condition not met within %s: %s", timeout, why)
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
