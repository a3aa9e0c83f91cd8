// Package skifftest builds the skiff binary (the all-in-one that `make run` starts) and
// runs it on free ports, for the suites under tests/ that drive a whole cluster: e2e,
// overload and bench.
package skifftest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Build compiles skiff.dev/services/cmd/skiff into a new temporary directory and
// returns the binary's path and a func that removes the directory; meant for
// TestMain, so that a package's tests share one build.
func Build() (binary string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "skiff-bin")
	if err != nil {
		return "", nil, err
	}
	binary = filepath.Join(dir, "skiff")
	build := exec.Command("go", "build", "-o", binary, "skiff.dev/services/cmd/skiff")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building skiff: %w", err)
	}
	return binary, func() { os.RemoveAll(dir) }, nil
}

// Main is a TestMain body: it builds skiff into *binary, runs the tests and removes
// the build.
func Main(m *testing.M, binary *string) {
	path, cleanup, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Cluster is one running skiff process.
type Cluster struct {
	t   *testing.T
	Cmd *exec.Cmd
	// DataDir is the process's --data-dir (a t.TempDir()).
	DataDir string
	// Kubeconfig is the admin kubeconfig skiff printed (an absolute path under DataDir).
	Kubeconfig string
	// NATSURL is the embedded NATS server's URL skiff printed; "" when it runs none.
	NATSURL string
	// RESTConfig is Kubeconfig loaded, with no client-side rate limit.
	RESTConfig *rest.Config
	// Client is a clientset over RESTConfig.
	Client kubernetes.Interface
	// Logs holds what the process wrote to stderr.
	Logs *SyncBuffer
	// Exited is closed when the process has exited, with ExitErr set.
	Exited  chan struct{}
	ExitErr error

	stopOnce sync.Once
}

// Start runs binary with a fresh --data-dir, every port 0 (free ports), and args; skiff's
// proxy is off (--proxy=false) unless args hold a --proxy flag, since its nftables table
// is host-wide and concurrent clusters must not share one. It waits up to 90 s for the
// KUBECONFIG line skiff prints and stops the process (Stop) when the test ends.
func Start(t *testing.T, binary string, args ...string) *Cluster {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--proxy") }) {
		args = append([]string{"--proxy=false"}, args...)
	}
	dataDir := t.TempDir()
	cmd := exec.Command(binary, append([]string{"--data-dir", dataDir, "--apiserver-port", "0", "--etcd-port", "0",
		"--exec-proxy-port", "0", "--kubelet-port", "0", "--nats-port", "0"}, args...)...)
	c := &Cluster{t: t, Cmd: cmd, DataDir: dataDir, Logs: &SyncBuffer{}, Exited: make(chan struct{})}
	cmd.Stderr = c.Logs
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
	go func() { c.ExitErr = cmd.Wait(); close(c.Exited) }()
	t.Cleanup(c.Stop)

	deadline := time.After(90 * time.Second)
	for c.Kubeconfig == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("skiff exited before printing KUBECONFIG; logs:\n%s", c.Logs)
			}
			// The "# events: NATS at ..." comment comes before it.
			if kubeconfig, ok := strings.CutPrefix(line, "export KUBECONFIG="); ok {
				c.Kubeconfig = kubeconfig
			}
			if url, ok := strings.CutPrefix(line, "# events: NATS at "); ok {
				c.NATSURL = url
			}
		case <-deadline:
			t.Fatalf("skiff did not print KUBECONFIG within 90s; logs:\n%s", c.Logs)
		}
	}
	go func() {
		for range lines {
		}
	}()
	if !filepath.IsAbs(c.Kubeconfig) {
		t.Errorf("KUBECONFIG %q is not an absolute path", c.Kubeconfig)
	}
	if c.RESTConfig, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	c.RESTConfig.QPS = -1
	c.Client = kubernetes.NewForConfigOrDie(c.RESTConfig)
	return c
}

// Stop sends SIGINT (as Ctrl-C does) and waits up to 30 s for a clean exit, failing the
// test if the process had already exited by itself, exits with an error or has to be
// killed; the logs are printed when the test failed. Later calls do nothing.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		select {
		case <-c.Exited:
			c.t.Errorf("skiff had exited by itself: %v; logs:\n%s", c.ExitErr, c.Logs)
			return
		default:
		}
		_ = c.Cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.Exited:
			if c.ExitErr != nil {
				c.t.Errorf("skiff exited with %v after SIGINT; logs:\n%s", c.ExitErr, c.Logs)
			}
		case <-time.After(30 * time.Second):
			_ = c.Cmd.Process.Kill()
			<-c.Exited
			c.t.Errorf("skiff did not stop within 30s of SIGINT; logs:\n%s", c.Logs)
		}
		if c.t.Failed() {
			c.t.Logf("skiff logs:\n%s", c.Logs)
		}
	})
}

// SyncBuffer collects a child's output safely across goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
