package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/kubelet/volumemanager"
	"skiff.dev/tests/internal/skifftest"
)

// restartable is a service process the test can kill and start again with the same
// arguments.
type restartable struct {
	t      *testing.T
	name   string
	args   []string
	cmd    *exec.Cmd
	exited chan error
	logs   *skifftest.SyncBuffer
}

func startRestartable(t *testing.T, name string, args ...string) *restartable {
	t.Helper()
	p := &restartable{t: t, name: name, args: args, logs: &skifftest.SyncBuffer{}}
	p.start()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("%s logs:\n%s", filepath.Base(name), p.logs)
		}
	})
	return p
}

func (p *restartable) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.name, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(p.cmd, p.exited)
}

// stop signals the process and waits up to 30 s for it to exit; nothing if it is down.
func (p *restartable) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// nodeRow is the STATUS column of `kubectl get nodes` for node.
func nodeStatus(ctx context.Context, c *cluster, node string) (string, error) {
	out, err := c.kubectl(ctx, "get", "nodes", "--no-headers")
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == node {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("node %s not listed:\n%s", node, out)
}

// TestNodeLifecycle kills a second kubelet: its node turns NotReady within 50 s, gets the
// unreachable taints, and a pod tolerating unreachable for 5 s is evicted; when the
// kubelet comes back the node is Ready again and the taints are gone.
func TestNodeLifecycle(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pkiDir := filepath.Join(filepath.Dir(c.Kubeconfig), "pki")
	bin := t.TempDir()
	kubeletBin, runtimeBin := buildService(t, bin, "kubelet"), buildService(t, bin, "runtime")

	const node = "e2e-worker"
	dir := t.TempDir()
	socket := filepath.Join(dir, "cri.sock")
	startProcess(t, runtimeBin, "--runtime", "sim", "--listen", socket, "--root-dir", filepath.Join(dir, "runtime"))
	eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(socket)
		return err == nil, fmt.Sprint(err)
	})
	kubeletDir := filepath.Join(dir, "kubelet")
	// The kubelet mounts its pods' token volumes (tmpfs) for real and is killed without a
	// chance to unmount them: they must go before the directory can be removed. Cleanups
	// run last-registered first, so this runs after the kubelet's stop and before dir's removal.
	t.Cleanup(func() { _ = volumemanager.UnmountAll(kubeletDir) })
	kubelet := startRestartable(t, kubeletBin, "--node-name", node,
		"--bootstrap-kubeconfig", filepath.Join(pkiDir, "bootstrap-kubelet.kubeconfig"),
		"--kubeconfig", filepath.Join(kubeletDir, "kubelet.kubeconfig"), "--root-dir", kubeletDir,
		"--container-runtime-endpoint", "unix://"+socket,
		"--node-ip", "127.0.0.1", "--address", "127.0.0.1", "--port", strconv.Itoa(freePort(t)))
	eventually(t, 90*time.Second, func() (bool, string) {
		status, err := nodeStatus(ctx, c, node)
		return status == "Ready", fmt.Sprint(status, err)
	})
	// The node registers Ready; node-ipam-controller allocates its range right after
	// (it retries when the kubelet's own node writes win a conflict).
	eventually(t, 10*time.Second, func() (bool, string) {
		nodeObj, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(nodeObj.Spec.PodCIDRs) > 0, fmt.Sprintf("node %s has no podCIDRs: node-ipam-controller did not allocate", node)
	})

	manifest := func(name string, tolerations string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  nodeName: %s
  containers: [{name: app, image: busybox, command: ["sleep", "3600"]}]
%s`, name, node, tolerations)
	}
	apply := func(m string) {
		t.Helper()
		cmd := c.kubectlCmd(ctx, nil, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(m)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	apply(manifest("short-toleration", `  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}]`))
	apply(manifest("default-toleration", ""))
	for _, name := range []string{"short-toleration", "default-toleration"} {
		c.waitRunning(ctx, t, name)
	}
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "default-toleration", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasToleration(pod, corev1.TaintNodeUnreachable, 300) || !hasToleration(pod, corev1.TaintNodeNotReady, 300) {
		t.Errorf("default-toleration's tolerations = %+v, want not-ready and unreachable for 300 s (DefaultTolerationSeconds)", pod.Spec.Tolerations)
	}

	// The kubelet dies without a word: its Lease stops being renewed.
	killed := time.Now()
	kubelet.stop(syscall.SIGKILL)
	eventually(t, 50*time.Second, func() (bool, string) {
		status, err := nodeStatus(ctx, c, node)
		return status == "NotReady", fmt.Sprint(status, err)
	})
	t.Logf("node NotReady %s after its kubelet died", time.Since(killed).Round(time.Second))
	eventually(t, 30*time.Second, func() (bool, string) {
		taints, err := c.kubectl(ctx, "get", "node", node, "-o", "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}")
		want := []string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}
		for _, w := range want {
			if !strings.Contains(taints, w) {
				return false, fmt.Sprint(taints, err)
			}
		}
		return true, ""
	})
	ready, err := c.kubectl(ctx, "get", "pod", "default-toleration", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil || ready != "False" {
		t.Errorf("pod on the unreachable node: Ready = %q (%v), want False", ready, err)
	}
	// Its 5 s toleration runs out: the taint eviction controller deletes it (it stays
	// Terminating until a kubelet confirms, as in Kubernetes).
	evicted := func(name string) (bool, string) {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return pod.DeletionTimestamp != nil, "no deletionTimestamp"
	}
	eventually(t, 30*time.Second, func() (bool, string) { return evicted("short-toleration") })
	if gone, _ := evicted("default-toleration"); gone {
		t.Error("the pod tolerating unreachable for 300 s was evicted within a minute")
	}

	// The kubelet comes back: Ready again, taints gone, the evicted pod finished off.
	kubelet.start()
	eventually(t, 60*time.Second, func() (bool, string) {
		status, err := nodeStatus(ctx, c, node)
		return status == "Ready", fmt.Sprint(status, err)
	})
	eventually(t, 30*time.Second, func() (bool, string) {
		taints, err := c.kubectl(ctx, "get", "node", node, "-o", "jsonpath={.spec.taints}")
		return err == nil && strings.TrimSpace(taints) == "", taints
	})
	eventually(t, 60*time.Second, func() (bool, string) {
		_, err := c.Client.CoreV1().Pods("default").Get(ctx, "short-toleration", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if gone, _ := evicted("default-toleration"); gone {
		t.Error("the pod tolerating unreachable for 300 s was evicted")
	}
}

func hasToleration(pod *corev1.Pod, key string, seconds int64) bool {
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil && *tol.TolerationSeconds == seconds {
			return true
		}
	}
	return false
}
