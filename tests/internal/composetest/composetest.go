// Package composetest brings compose.yaml's full stack up in Docker under a project name
// of its own, for the suites that drive it as a user does (tests/faults): the published
// apiserver port with the admin kubeconfig, the real kubectl, docker compose and docker to
// kill, pause, partition and start containers. Whatever happens, `docker compose down -v`
// runs at the end and the harness checks that no container, network or volume is left.
//
// It is the harness of tests/compose/compose_test.go (newStack, kubectl, eventually, down)
// as a package other suites can import.
package composetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Images the stack runs: skiff's own (make images) and the third-party ones (make
// offline-images here, pulled elsewhere).
var (
	SkiffImages = []string{"skiff/skiff", "skiff/apiserver", "skiff/scheduler", "skiff/controller-manager", "skiff/csr-signer", "skiff/exec-proxy", "skiff/kubelet"}
	ThirdParty  = []string{"quay.io/coreos/etcd:v3.6.16", "nats:2.15.2", "jaegertracing/jaeger:2.13.0", "coredns/coredns:1.15.0"}
)

// Options shape a Stack.
type Options struct {
	// Runtime is SKIFF_RUNTIME for the kubelets: "process" (default) or "sim".
	Runtime string
	// Kubelets is how many kubelet replicas Up starts (3 when 0).
	Kubelets int
}

// Stack is one compose project of compose.yaml.
type Stack struct {
	Ctx        context.Context
	Compose    []string // the compose command, e.g. {"docker", "compose"}
	Project    string
	Root       string // repository root, holding compose.yaml
	Env        []string
	DataDir    string
	Kubeconfig string
	JaegerURL  string
	Config     *rest.Config // the admin's, set by Up
	Client     kubernetes.Interface
	opts       Options
}

// New checks what the stack needs, names a project of its own, picks free host ports
// and registers the teardown, which runs even when the test fails or panics. The stack
// is not started: call Up.
func New(t *testing.T, opts Options) *Stack {
	t.Helper()
	if opts.Runtime == "" {
		opts.Runtime = "process"
	}
	if opts.Kubelets == 0 {
		opts.Kubelets = 3
	}
	for _, tool := range []string{"docker", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: %v", tool, err)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	tag := os.Getenv("SKIFF_TAG")
	if tag == "" {
		tag = "dev"
	}
	for _, image := range SkiffImages {
		requireImage(t, image+":"+tag, "make images")
	}
	for _, image := range ThirdParty {
		requireImage(t, image, "make offline-images")
	}

	// Stop short of go test's -timeout, so the teardown always gets to run.
	ctx, cancel := context.WithCancel(context.Background())
	if deadline, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-3*time.Minute))
	}
	t.Cleanup(cancel)

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	s := &Stack{
		Ctx:     ctx,
		Compose: composeCommand(t),
		Project: "skifftest" + hex.EncodeToString(suffix),
		Root:    root,
		DataDir: t.TempDir(),
		opts:    opts,
	}
	apiPort, jaegerPort := freePort(t), freePort(t)
	s.Kubeconfig = filepath.Join(s.DataDir, "admin.kubeconfig")
	s.JaegerURL = "http://127.0.0.1:" + jaegerPort
	s.Env = append(os.Environ(),
		"SKIFF_PUBLISH_ADDRESS=127.0.0.1",
		"SKIFF_APISERVER_PORT="+apiPort,
		"SKIFF_JAEGER_PORT="+jaegerPort,
		"SKIFF_DATA_DIR="+s.DataDir,
		"SKIFF_RUNTIME="+opts.Runtime,
		"SKIFF_TAG="+tag,
		"COMPOSE_PROJECT_NAME="+s.Project,
	)
	t.Logf("compose project %s: apiserver 127.0.0.1:%s, Jaeger %s", s.Project, apiPort, s.JaegerURL)
	t.Cleanup(func() {
		// SKIFF_TEST_LOGS_DIR keeps every service's whole log, failed or not.
		if dir := os.Getenv("SKIFF_TEST_LOGS_DIR"); dir != "" {
			out, _ := s.ComposeOutput(context.Background(), "logs", "--no-color", "--timestamps")
			file := filepath.Join(dir, s.Project+".log")
			if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
				t.Logf("keeping the logs: %v", err)
			} else {
				t.Logf("every service's log: %s", file)
			}
		}
		if t.Failed() {
			out, _ := s.ComposeOutput(context.Background(), "logs", "--no-color", "--tail=300")
			t.Logf("docker compose logs (last 300 lines a service):\n%s", out)
		}
		s.Down(t)
	})
	return s
}

// requireImage fails the test when image is missing, naming the make target that builds it.
func requireImage(t *testing.T, image, target string) {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Fatalf("image %s is missing: run `%s`", image, target)
	}
}

// composeCommand is $COMPOSE, else `docker compose` where the plugin exists, else
// docker-compose.
func composeCommand(t *testing.T) []string {
	if c := strings.Fields(os.Getenv("COMPOSE")); len(c) > 0 {
		return c
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	t.Fatal("neither `docker compose` nor docker-compose is installed")
	return nil
}

// freePort is a TCP port free on 127.0.0.1 right now.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// ComposeOutput runs `compose -f compose.yaml -p PROJECT args...` and returns its
// combined output.
func (s *Stack) ComposeOutput(ctx context.Context, args ...string) (string, error) {
	argv := append(append([]string{}, s.Compose[1:]...), "-f", filepath.Join(s.Root, "compose.yaml"), "-p", s.Project)
	cmd := exec.CommandContext(ctx, s.Compose[0], append(argv, args...)...)
	cmd.Dir, cmd.Env = s.Root, s.Env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ComposeRun runs a compose command and fails t when it fails.
func (s *Stack) ComposeRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := s.ComposeOutput(s.Ctx, args...); err != nil {
		t.Fatalf("compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Docker runs `docker args...` and fails t when it fails, returning its trimmed output.
func (s *Stack) Docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(s.Ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Containers lists the IDs (full) of the containers of a compose service, sorted.
func (s *Stack) Containers(t *testing.T, service string) []string {
	t.Helper()
	out := s.Docker(t, "ps", "-aq", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+s.Project,
		"--filter", "label=com.docker.compose.service="+service)
	ids := strings.Fields(out)
	sort.Strings(ids)
	if len(ids) == 0 {
		t.Fatalf("compose service %s has no container", service)
	}
	return ids
}

// Network is the name of the project's default network.
func (s *Stack) Network() string { return s.Project + "_default" }

// Kubectl runs the real kubectl with the stack's admin kubeconfig.
func (s *Stack) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.Kubeconfig, "--cache-dir", filepath.Join(s.DataDir, "kubectl-cache")}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Eventually calls check every interval until it returns nil or timeout passes, then
// fails t with the last error.
func (s *Stack) Eventually(t *testing.T, timeout, interval time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.Ctx, timeout)
	defer cancel()
	var err error
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
		err = check(callCtx)
		callCancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		case <-time.After(interval):
		}
	}
}

// Up starts the stack with Options.Kubelets kubelets, waits for the admin kubeconfig and
// /readyz, then for every node Ready.
func (s *Stack) Up(t *testing.T) {
	t.Helper()
	s.ComposeRun(t, "up", "-d", "--no-build", "--scale", fmt.Sprintf("kubelet=%d", s.opts.Kubelets))
	s.Eventually(t, 2*time.Minute, 2*time.Second, "admin kubeconfig and apiserver ready", func(ctx context.Context) error {
		if _, err := os.Stat(s.Kubeconfig); err != nil {
			return err
		}
		_, err := s.Kubectl(ctx, "", "get", "--raw", "/readyz")
		return err
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	s.Config = cfg
	s.Client = kubernetes.NewForConfigOrDie(cfg)
	s.WaitReadyNodes(t, s.opts.Kubelets, 3*time.Minute)
}

// ReadyNodes lists the nodes whose Ready condition is True.
func (s *Stack) ReadyNodes(ctx context.Context) ([]string, error) {
	nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, n.Name)
			}
		}
	}
	sort.Strings(ready)
	return ready, nil
}

// WaitReadyNodes waits until exactly n nodes are Ready and returns their names.
func (s *Stack) WaitReadyNodes(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	var names []string
	s.Eventually(t, timeout, 2*time.Second, fmt.Sprintf("%d nodes Ready", n), func(ctx context.Context) error {
		ready, err := s.ReadyNodes(ctx)
		if err != nil {
			return err
		}
		if len(ready) != n {
			return fmt.Errorf("%d Ready: %v", len(ready), ready)
		}
		names = ready
		return nil
	})
	return names
}

// Down removes the project's containers, networks and volumes and fails t if any is
// left. It runs in t.Cleanup too; a second run finds nothing to do.
func (s *Stack) Down(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A paused container cannot be stopped: unpause whatever a failed step left paused.
	if out, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "status=paused",
		"--filter", "label=com.docker.compose.project="+s.Project).Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(ctx, "docker", "unpause", id).Run()
		}
	}
	if out, err := s.ComposeOutput(ctx, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
		t.Errorf("compose down -v: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + s.Project
	for _, what := range [][]string{
		{"ps", "-aq", "--filter", label},
		{"network", "ls", "-q", "--filter", label},
		{"volume", "ls", "-q", "--filter", label},
	} {
		out, err := exec.CommandContext(ctx, "docker", what...).CombinedOutput()
		if err != nil {
			t.Errorf("docker %s: %v\n%s", strings.Join(what, " "), err, out)
		} else if left := strings.TrimSpace(string(out)); left != "" {
			t.Errorf("after down -v, docker %s still lists:\n%s", what[0], left)
		}
	}
}
