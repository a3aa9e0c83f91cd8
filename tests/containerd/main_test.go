// Package containerd runs skiff's all-in-one on real containers: a private
// containerd (Debian's containerd, runc and containernetworking-plugins)
// started by skiff, images built here from busybox-static and imported with
// ctr, and the real kubectl. One skiff serves every test; the tests run in
// parallel. Where containerd cannot run (not installed, not root) the suite
// prints one line saying why and passes.
package containerd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podCIDR is the all-in-one node's pod range: skiff's --pod-cidr, which the kubelet uses
// until node IPAM sets the node's spec.podCIDR, and its --cluster-cidr, so that IPAM
// gives the one node the same range whether it gets there before the first pod or after.
const podCIDR = "10.244.7.0/24"

// nodeIface and nodeIP: an address of the suite's own, on an empty bridge, that every
// skiff listener binds (--bind-address), as scripts/conformance/cluster.sh does: pods
// reach the apiserver through the kubernetes Service, whose endpoint may not be
// loopback, while nothing listens on the machine's real interfaces.
const (
	nodeIface = "skiffe2e0"
	nodeIP    = "10.200.7.1"
)

// clusterDNS is the kubelet's --cluster-dns (kube-dns's Service IP). CoreDNS answers
// behind it when bin/coredns is built (make coredns); without it the suite only
// checks what ClusterFirst pods' resolv.conf says.
const clusterDNS = "10.96.0.10"

// corednsBinary is bin/coredns as `make coredns` builds it (SKIFF_COREDNS names
// another), or "" when it is not built: tests/e2e find it the same way.
func corednsBinary() string {
	path := os.Getenv("SKIFF_COREDNS")
	if path == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "bin", "coredns"))
		if err != nil {
			return ""
		}
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// skiff is the one all-in-one of the suite.
var skiff struct {
	dataDir, kubeconfig, cacheDir, socket string
	coredns                               string // the CoreDNS binary skiff runs, "" for none
	client                                kubernetes.Interface
	cri                                   runtimeapi.RuntimeServiceClient
	logs                                  *syncBuffer
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

// errContainerdCannotStart is skiff's failure to start its containerd.
type errContainerdCannotStart struct{ reason string }

func (e errContainerdCannotStart) Error() string { return e.reason }

// whyNot names what keeps containerd from running here, "" if nothing.
func whyNot() string {
	if os.Geteuid() != 0 {
		return "containerd needs root"
	}
	for _, bin := range []string{"containerd", "runc", "ctr", "kubectl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " is not installed (apt-get install containerd runc containernetworking-plugins)"
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return "the CNI plugins are not installed (apt-get install containernetworking-plugins)"
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return "/bin/busybox is missing (apt-get install busybox-static): the test images are built from it"
	}
	return ""
}

func TestMain(m *testing.M) {
	if why := whyNot(); why != "" {
		fmt.Printf("SKIP containerd suite: %s\n", why)
		os.Exit(0)
	}
	code, err := run(m)
	var cannot errContainerdCannotStart
	if errors.As(err, &cannot) {
		fmt.Printf("SKIP containerd suite: containerd cannot start here: %s\n", cannot.reason)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if skiff.logs != nil {
			fmt.Fprintf(os.Stderr, "skiff logs:\n%s\n", skiff.logs)
		}
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "skiff-containerd-e2e")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "skiff")
	build := exec.Command("go", "build", "-o", bin, "skiff.dev/services/cmd/skiff")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("build skiff: %w", err)
	}
	images := filepath.Join(dir, "images.tar")
	if err := buildImages(images, "/bin/busybox"); err != nil {
		return 0, fmt.Errorf("build images: %w", err)
	}

	if err := addNodeIP(); err != nil {
		return 0, err
	}
	defer func() { _ = exec.Command("ip", "link", "delete", nodeIface).Run() }()

	skiff.dataDir, skiff.cacheDir = filepath.Join(dir, "data"), filepath.Join(dir, "cache")
	skiff.logs = &syncBuffer{}
	skiff.coredns = corednsBinary()
	// The proxy runs (the all-in-one's default as root), in its default table.
	cmd := exec.Command(bin, "--data-dir", skiff.dataDir, "--runtime", "containerd", "--pod-cidr", podCIDR, "--cluster-cidr", podCIDR,
		"--pod-infra-container-image", pauseImage, "--bind-address", nodeIP, "--apiserver-port", "0", "--etcd-port", "0",
		"--exec-proxy-port", "0", "--kubelet-port", "0", "--nats-port", "0", "--node-name", "e2e-containerd",
		"--coredns", skiff.coredns, "--coredns-port", "0", "--cluster-dns", clusterDNS)
	cmd.Stderr = skiff.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("skiff exited with %v after SIGINT", err)
			}
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("skiff did not stop within 90s of SIGINT")
		}
		return nil
	}
	defer func() { _ = stop() }()

	lines := bufio.NewScanner(stdout)
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, "export KUBECONFIG=") {
				found <- strings.TrimPrefix(l, "export KUBECONFIG=")
			}
		}
	}()
	select {
	case skiff.kubeconfig = <-found:
	case err := <-exited:
		stopped = true
		// skiff's "containerd exited: ..." / "containerd did not answer ...":
		// the machine cannot run containerd (e.g. no overlayfs, no privileges).
		for _, l := range strings.Split(skiff.logs.String(), "\n") {
			if strings.HasPrefix(l, "skiff: containerd exited") || strings.HasPrefix(l, "skiff: containerd did not answer") {
				return 0, errContainerdCannotStart{reason: strings.TrimPrefix(l, "skiff: ")}
			}
		}
		return 0, fmt.Errorf("skiff exited before printing KUBECONFIG: %v", err)
	case <-time.After(90 * time.Second):
		return 0, fmt.Errorf("skiff did not print KUBECONFIG within 90s")
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", skiff.kubeconfig)
	if err != nil {
		return 0, err
	}
	restConfig.QPS = -1
	skiff.client = kubernetes.NewForConfigOrDie(restConfig)

	// The images go into skiff's own containerd, never a system one.
	skiff.socket = filepath.Join(skiff.dataDir, "containerd", "containerd.sock")
	if out, err := exec.Command("ctr", "-a", skiff.socket, "-n", "k8s.io", "images", "import", images).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ctr images import: %v\n%s", err, out)
	}
	conn, err := grpc.NewClient("unix://"+skiff.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	skiff.cri = runtimeapi.NewRuntimeServiceClient(conn)

	code := m.Run()
	if err := stop(); err != nil {
		return code, err
	}
	if code == 0 {
		if err := leftovers(); err != nil {
			return 1, err
		}
	}
	return code, nil
}

// addNodeIP puts nodeIP on nodeIface, an empty bridge made for it.
func addNodeIP() error {
	for _, args := range [][]string{
		{"link", "add", nodeIface, "type", "bridge"},
		{"addr", "replace", nodeIP + "/32", "dev", nodeIface},
		{"link", "set", nodeIface, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil && !(args[1] == "add" && strings.Contains(string(out), "File exists")) {
			return fmt.Errorf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// leftovers reports what skiff's containerd left behind once stopped: shims
// serving its socket, mounts under its data dir, its bridge.
func leftovers() error {
	var found []string
	out, _ := exec.Command("pgrep", "-af", "containerd-shim").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, skiff.socket) {
			found = append(found, "shim: "+l)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, skiff.dataDir) {
			found = append(found, "mount: "+l)
		}
	}
	if _, err := os.Stat("/sys/class/net/skiff0"); err == nil {
		found = append(found, "link skiff0")
	}
	if len(found) > 0 {
		return fmt.Errorf("left behind after skiff stopped:\n%s", strings.Join(found, "\n"))
	}
	return nil
}

// kubectlCmd is the real kubectl against the suite's skiff with extra
// environment.
func kubectlCmd(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+skiff.kubeconfig, "KUBECACHEDIR="+skiff.cacheDir), env...)
	return cmd
}

func kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := kubectlCmd(ctx, nil, args...).CombinedOutput()
	return string(out), err
}

func mustKubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runPod starts a busybox pod running script (sh -c) with kubectl run.
func runPod(ctx context.Context, t *testing.T, name, script string, extra ...string) {
	t.Helper()
	args := append([]string{"run", name, "--image=" + busyboxImage, "--image-pull-policy=IfNotPresent"}, extra...)
	mustKubectl(ctx, t, append(args, "--command", "--", "sh", "-c", script)...)
}

func getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return skiff.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
}

// waitRunning waits until the pod runs and returns it.
func waitRunning(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 90*time.Second, func() (bool, string) {
		var err error
		if pod, err = getPod(ctx, name); err != nil {
			return false, err.Error()
		}
		return pod.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s: %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	})
	return pod
}

// waitReason waits until the pod's first container is waiting or
// terminated with reason.
func waitReason(ctx context.Context, t *testing.T, name, reason string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 90*time.Second, func() (bool, string) {
		var err error
		if pod, err = getPod(ctx, name); err != nil {
			return false, err.Error()
		}
		if len(pod.Status.ContainerStatuses) == 0 {
			return false, "no container status"
		}
		st := pod.Status.ContainerStatuses[0].State
		switch {
		case st.Waiting != nil:
			return st.Waiting.Reason == reason, "waiting: " + st.Waiting.Reason
		case st.Terminated != nil:
			return st.Terminated.Reason == reason, "terminated: " + st.Terminated.Reason
		}
		return false, "running"
	})
	return pod
}

// eventually polls cond every 200 ms until it holds or timeout passes.
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
