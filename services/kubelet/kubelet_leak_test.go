package kubelet_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/kubelet"
)

// TestRunLeavesNoGoroutines runs a kubelet with a pod, cancels it, and checks
// that none of the kubelet's goroutines (workers, PLEG, informer, loops)
// outlive Run.
func TestRunLeavesNoGoroutines(t *testing.T) {
	cri := startSim(t)
	pod := newPod("web", v1.RestartPolicyAlways, nil)
	pod.UID = "uid-web"
	client := fake.NewClientset(pod)
	kl, err := kubelet.New(kubelet.Config{
		NodeName: nodeName, Client: client, RuntimeEndpoint: cri.Socket, RootDir: rootDir(t), NodeIP: "10.1.2.3",
		HealthzAddr: "127.0.0.1:0", PodCIDR: sim.PodCIDR,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kl.Run(ctx) }()

	eventually(t, 30*time.Second, "pod Running", func() error {
		p, err := client.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	var leaked []string
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		leaked = kubeletGoroutines()
		return len(leaked) == 0, nil
	})
	if len(leaked) > 0 {
		t.Fatalf("%d kubelet goroutines outlived Run:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// kubeletGoroutines returns the stacks of goroutines running kubelet code or
// a client-go informer, other than the test's own.
func kubeletGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "TestRunLeavesNoGoroutines") {
			continue
		}
		if strings.Contains(g, "skiff.dev/services/kubelet.") || strings.Contains(g, "skiff.dev/services/kubelet/") ||
			strings.Contains(g, "k8s.io/client-go/tools/cache") {
			out = append(out, g)
		}
	}
	return out
}
