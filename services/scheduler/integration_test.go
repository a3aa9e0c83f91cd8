package scheduler_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/scheduler"
)

// createReadyNode registers a node the way a kubelet does: create the Node,
// then write its status (capacity, allocatable, Ready) through nodes/status.
func createReadyNode(t *testing.T, client kubernetes.Interface, name, cpu string) {
	t.Helper()
	ctx := context.Background()
	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	rl := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status = v1.NodeStatus{
		Capacity:    rl,
		Allocatable: rl,
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update node %s status: %v", name, err)
	}
}

func createPod(t *testing.T, client kubernetes.Interface, name, cpu string) {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "app",
			Image:     "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// waitForPod polls the pod until cond holds, failing the test after a
// generous deadline; it returns the last pod seen.
func waitForPod(t *testing.T, client kubernetes.Interface, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the apiserver may be busy; keep polling
		}
		last = pod
		return cond(pod), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s %s: %v; last seen: nodeName=%q conditions=%+v", name, what, err, last.Spec.NodeName, last.Status.Conditions)
	}
	return last
}

func podScheduled(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func TestSchedulerAgainstARealAPIServer(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	createReadyNode(t, client, "node-a", "2")
	createReadyNode(t, client, "node-b", "2")

	sched, err := scheduler.New(scheduler.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})

	t.Run("a pod that fits is bound", func(t *testing.T) {
		createPod(t, client, "fits", "500m")
		pod := waitForPod(t, client, "fits", "bound", func(p *v1.Pod) bool {
			c := podScheduled(p)
			return p.Spec.NodeName != "" && c != nil && c.Status == v1.ConditionTrue
		})
		if pod.Spec.NodeName != "node-a" && pod.Spec.NodeName != "node-b" {
			t.Fatalf("bound to unknown node %q", pod.Spec.NodeName)
		}
	})

	t.Run("a pod bigger than every node is unschedulable until a big node joins", func(t *testing.T) {
		createPod(t, client, "too-big", "3")
		waitForPod(t, client, "too-big", "unschedulable", func(p *v1.Pod) bool {
			c := podScheduled(p)
			return c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable &&
				c.Message == "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
		})
		createReadyNode(t, client, "node-big", "8")
		pod := waitForPod(t, client, "too-big", "bound", func(p *v1.Pod) bool {
			c := podScheduled(p)
			return p.Spec.NodeName != "" && c != nil && c.Status == v1.ConditionTrue
		})
		if pod.Spec.NodeName != "node-big" {
			t.Fatalf("bound to %q, want node-big", pod.Spec.NodeName)
		}
	})
}
