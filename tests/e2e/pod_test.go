package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProcessRuntime runs real host processes as containers: pods complete with their
// exit codes, restart per restartPolicy, and stop on delete and on Ctrl-C.
func TestProcessRuntime(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")

	t.Run("kubectl get nodes shows one Ready node", func(t *testing.T) {
		eventually(t, 60*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "nodes")
			return err == nil && strings.Contains(out, "e2e-process") && strings.Contains(out, " Ready "), out
		})
		out := c.mustKubectl(ctx, "get", "nodes")
		if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(header, " ") != "NAME STATUS ROLES AGE VERSION" {
			t.Errorf("header %q", header)
		}
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 1 {
			t.Fatalf("nodes: %v %v", err, nodes)
		}
	})

	t.Run("the kubelet renews its Lease", func(t *testing.T) {
		var first *coordinationv1.Lease
		eventually(t, 30*time.Second, func() (bool, string) {
			lease, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "e2e-process", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if first == nil {
				first = lease
			}
			return lease.Spec.RenewTime != nil && first.Spec.RenewTime != nil && lease.Spec.RenewTime.After(first.Spec.RenewTime.Time),
				fmt.Sprintf("renewTime %v", lease.Spec.RenewTime)
		})
	})

	t.Run("a pod that echoes hello reaches Completed with exit code 0", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "hello", "--image=busybox", "--restart=Never", "--command", "--", "sh", "-c", "echo hello")
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return pod.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("phase %s %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
		})
		pod, _ := pods.Get(ctx, "hello", metav1.GetOptions{})
		cs := containerStatus(pod)
		if cs == nil || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" {
			t.Errorf("container status %+v", cs)
		}
		if pod.Spec.NodeName != "e2e-process" || pod.Status.StartTime == nil || pod.Status.PodIP == "" {
			t.Errorf("nodeName %q startTime %v podIP %q", pod.Spec.NodeName, pod.Status.StartTime, pod.Status.PodIP)
		}
		out := c.mustKubectl(ctx, "get", "pod", "hello")
		if !strings.Contains(out, "Completed") {
			t.Errorf("kubectl get pod hello:\n%s", out)
		}
	})

	t.Run("a pod exiting 1 under OnFailure is restarted", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "flaky", "--image=busybox", "--restart=OnFailure", "--command", "--", "sh", "-c", "exit 1")
		eventually(t, 90*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "flaky", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := containerStatus(pod)
			return cs != nil && cs.RestartCount >= 1, fmt.Sprintf("%+v", pod.Status)
		})
		pod, _ := pods.Get(ctx, "flaky", metav1.GetOptions{})
		if last := containerStatus(pod).LastTerminationState.Terminated; last == nil || last.ExitCode != 1 {
			t.Errorf("lastState %+v, want terminated with exit code 1", containerStatus(pod).LastTerminationState)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			t.Errorf("OnFailure pod reached terminal phase %s", pod.Status.Phase)
		}
	})

	t.Run("kubectl get pods -w prints updates as they happen", func(t *testing.T) {
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		cmd := exec.CommandContext(watchCtx, kubectlPath(t), "get", "pods", "-w")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+c.cacheDir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stopWatch(); _ = cmd.Wait() }()
		var mu sync.Mutex
		var seen []string
		go func() {
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				mu.Lock()
				seen = append(seen, scanner.Text())
				mu.Unlock()
			}
		}()
		// Wait for the initial listing so the pod below is reported as a change.
		eventually(t, 30*time.Second, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) > 0, "no output yet"
		})
		c.mustKubectl(ctx, "run", "watched", "--image=busybox", "--restart=Never", "--command", "--", "sh", "-c", "sleep 1")
		eventually(t, 60*time.Second, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			var statuses []string
			for _, line := range seen {
				if f := strings.Fields(line); len(f) >= 3 && f[0] == "watched" {
					statuses = append(statuses, f[2])
				}
			}
			joined := strings.Join(statuses, ",")
			return strings.Contains(joined, "Pending") && strings.Contains(joined, "Completed"), "watched pod lines: " + joined
		})
	})

	t.Run("a running pod's process stops when the pod is deleted", func(t *testing.T) {
		marker := fmt.Sprintf("skiff-e2e-%d", time.Now().UnixNano())
		c.mustKubectl(ctx, "run", "sleeper", "--image=busybox", "--restart=Never", "--command", "--", "sh", "-c", "sleep 3600; echo "+marker)
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "sleeper", metav1.GetOptions{})
			return err == nil && pod.Status.Phase == corev1.PodRunning, fmt.Sprintf("%v %v", err, pod)
		})
		if !processRunning(marker) {
			t.Fatalf("no host process carries the pod's command %q", marker)
		}
		out := c.mustKubectl(ctx, "delete", "pod", "sleeper")
		if !strings.Contains(out, `pod "sleeper" deleted`) {
			t.Errorf("kubectl delete: %s", out)
		}
		if _, err := pods.Get(ctx, "sleeper", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("kubectl delete returned before the pod was gone: %v", err)
		}
		eventually(t, 10*time.Second, func() (bool, string) {
			return !processRunning(marker), "the pod's process still runs"
		})
	})

	t.Run("an unschedulable pod is retried when the node changes", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "picky", "--image=busybox", "--restart=Never", "--overrides",
			`{"spec":{"nodeSelector":{"disk":"ssd"}}}`, "--command", "--", "sh", "-c", "echo picked")
		eventually(t, 30*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "picky", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == "Unschedulable" &&
					strings.Contains(cond.Message, "0/1 nodes are available") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("conditions %+v", pod.Status.Conditions)
		})
		c.mustKubectl(ctx, "label", "node", "e2e-process", "disk=ssd")
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "picky", metav1.GetOptions{})
			return err == nil && pod.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("%v %+v", err, pod.Status)
		})
	})

	t.Run("a pod whose container has no command gets CreateContainerError", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "nocmd", "--image=nginx", "--restart=Never")
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, "nocmd", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := containerStatus(pod)
			return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerError", fmt.Sprintf("%+v", pod.Status)
		})
	})

	t.Run("bad input is an Error from server and never a 500", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "empty.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: empty\nspec:\n  containers: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			args []string
			want string
		}{
			{[]string{"get", "pods", "--field-selector", "foo=bar"}, "Error from server (BadRequest)"},
			{[]string{"create", "--validate=false", "-f", manifest}, `The Pod "empty" is invalid: spec.containers: Required value`},
			{[]string{"get", "pod", "does-not-exist"}, `Error from server (NotFound): pods "does-not-exist" not found`},
			{[]string{"run", "hello", "--image=busybox", "--restart=Never", "--command", "--", "true"}, `Error from server (AlreadyExists): pods "hello" already exists`},
		}
		for _, tc := range cases {
			out, err := c.kubectl(ctx, tc.args...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("kubectl %s: err %v, output %q, want it to contain %q", strings.Join(tc.args, " "), err, out, tc.want)
			}
		}
	})

	t.Run("Ctrl-C stops every pod's process", func(t *testing.T) {
		marker := fmt.Sprintf("skiff-e2e-%d", time.Now().UnixNano())
		c.mustKubectl(ctx, "run", "survivor", "--image=busybox", "--restart=Never", "--command", "--", "sh", "-c", "sleep 3600; echo "+marker)
		eventually(t, 60*time.Second, func() (bool, string) {
			return processRunning(marker), "the pod's process has not started"
		})
		c.Stop()
		if processRunning(marker) {
			t.Errorf("the pod's process %q outlived skiff", marker)
		}
	})
}

// TestSimRuntime runs simulated containers: a pod reaches Running and kubectl delete
// returns once it is gone.
func TestSimRuntime(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")

	c.mustKubectl(ctx, "run", "nginx", "--image=nginx", "--restart=Never")
	eventually(t, 60*time.Second, func() (bool, string) {
		out, err := c.kubectl(ctx, "get", "pod", "nginx")
		return err == nil && strings.Contains(out, "1/1") && strings.Contains(out, "Running"), out
	})
	pod, err := pods.Get(ctx, "nginx", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, cond := range pod.Status.Conditions {
		ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
	}
	if !ready || pod.Status.PodIP == "" || containerStatus(pod).ContainerID == "" {
		t.Errorf("running pod status %+v", pod.Status)
	}

	out := c.mustKubectl(ctx, "delete", "pod", "nginx")
	if !strings.Contains(out, `pod "nginx" deleted`) {
		t.Errorf("kubectl delete: %s", out)
	}
	if _, err := pods.Get(ctx, "nginx", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("kubectl delete returned before the pod was gone: %v", err)
	}
}
