package kubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
)

// TestKubeletRunsRealProcesses runs pods on the process runtime: real exit
// codes, CRI logs where kubectl logs expects them, and the runtime's refusal
// of a container without a command reported as CreateContainerError.
func TestKubeletRunsRealProcesses(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t)
	rt, err := process.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	rootDir := rootDir(t)
	runKubelet(t, client, cri.Socket, rootDir)

	failing := newPod("failing", v1.RestartPolicyNever, nil)
	failing.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello from $(POD_NAME); exit 3"}
	failing.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD_NAME",
		ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	create(t, client, failing)

	noCommand := newPod("no-command", v1.RestartPolicyAlways, nil)
	noCommand.Spec.Containers[0].Command = nil
	create(t, client, noCommand)

	var uid string
	eventually(t, 60*time.Second, "failing pod Failed with exit code 3", func() error {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "failing", metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid = string(pod.UID)
		cs := pod.Status.ContainerStatuses
		if pod.Status.Phase != v1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil ||
			cs[0].State.Terminated.ExitCode != 3 || cs[0].State.Terminated.Reason != "Error" {
			return fmt.Errorf("phase=%s statuses=%+v", pod.Status.Phase, cs)
		}
		return nil
	})
	logPath := filepath.Join(rootDir, "pods", "default_failing_"+uid, "main", "0.log")
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("container log: %v", err)
	}
	if !strings.Contains(string(data), "hello from failing") {
		t.Errorf("log %s = %q, want the container's output", logPath, data)
	}

	eventually(t, 60*time.Second, "CreateContainerError", func() error {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "no-command", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cs := pod.Status.ContainerStatuses
		if pod.Status.Phase != v1.PodPending || len(cs) != 1 || cs[0].State.Waiting == nil ||
			cs[0].State.Waiting.Reason != "CreateContainerError" || cs[0].State.Waiting.Message == "" {
			return fmt.Errorf("phase=%s statuses=%+v", pod.Status.Phase, cs)
		}
		return nil
	})
}
