package kubelet

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/podworkers"
)

func TestActiveDeadlineFailsThePod(t *testing.T) {
	kl := newTestKubelet()
	recorder := record.NewFakeRecorder(10)
	kl.recorder = recorder
	kl.workQueue = podworkers.NewWorkQueue(nil)
	started := metav1.NewTime(time.Now().Add(-10 * time.Second))
	pod := func(deadline *int64) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-deadline"},
			Spec:       v1.PodSpec{ActiveDeadlineSeconds: deadline, Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
			Status:     v1.PodStatus{Phase: v1.PodRunning, StartTime: &started},
		}
	}
	running := &container.PodStatus{ID: "uid-deadline", IPs: []string{"10.88.0.5"},
		SandboxStatuses: []*runtimeapi.PodSandboxStatus{readySandbox("10.88.0.5")},
		ContainerStatuses: []*container.Status{{ID: container.ContainerID{Type: testRuntime, ID: "c1"}, Name: "app",
			State: container.ContainerStateRunning, StartedAt: started.Time}}}

	// Ten seconds in, a deadline of an hour is not reached; nothing to sync for it.
	far := pod(ptr.To[int64](3600))
	kl.podManager.UpdatePod(far)
	if s := kl.generateAPIPodStatus(far, running, false); s.Phase != v1.PodRunning {
		t.Fatalf("deadline not reached: phase %s", s.Phase)
	}
	if got := kl.getPodsToSync(); len(got) != 0 {
		t.Fatalf("deadline not reached: pods to sync %v", got)
	}

	// The deadline lowered to 5 s (the one spec change a pod takes): synced, failed.
	near := pod(ptr.To[int64](5))
	kl.podManager.UpdatePod(near)
	if got := kl.getPodsToSync(); len(got) != 1 || got[0].UID != near.UID {
		t.Fatalf("deadline passed: pods to sync %v, want the pod", got)
	}
	s := kl.generateAPIPodStatus(near, running, false)
	if s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" || s.Message != "Pod was active on the node longer than the specified deadline" {
		t.Fatalf("deadline passed: phase %s reason %q message %q", s.Phase, s.Reason, s.Message)
	}
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Normal DeadlineExceeded ") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no DeadlineExceeded event")
	}
	// Once the kubelet holds the Failed status, the pod is no longer synced for it.
	kl.statusManager.SetPodStatus(near, s)
	// Stopped for it, its container exits 0 (pause does on SIGTERM): still Failed.
	stopped := &container.PodStatus{ID: "uid-deadline", ContainerStatuses: []*container.Status{{ID: container.ContainerID{Type: testRuntime, ID: "c1"},
		Name: "app", State: container.ContainerStateExited, ExitCode: 0, StartedAt: started.Time, FinishedAt: time.Now()}}}
	if s := kl.generateAPIPodStatus(near, stopped, true); s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" {
		t.Fatalf("after its containers stopped: phase %s reason %q; want Failed DeadlineExceeded", s.Phase, s.Reason)
	}
	if got := kl.getPodsToSync(); len(got) != 0 {
		t.Fatalf("failed pod: pods to sync %v", got)
	}
}
