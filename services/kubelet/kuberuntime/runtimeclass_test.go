package kuberuntime

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/runtimeclass"
)

// TestSyncPodRunsTheSandboxWithItsRuntimeClassHandler: the sandbox of a pod naming a
// RuntimeClass runs with the class's handler; a handler the runtime does not have, or a
// class that does not exist, fails the sandbox with a FailedCreatePodSandBox event that
// says why, and the pod gets no sandbox.
func TestSyncPodRunsTheSandboxWithItsRuntimeClassHandler(t *testing.T) {
	ctx := context.Background()
	rt := sim.New()
	t.Cleanup(rt.Close)
	conn, err := Dial(socketharness.Start(t, rt, rt).Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	recorder := record.NewFakeRecorder(10)
	classes := fake.NewClientset(
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}, Handler: sim.RuntimeName},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}, Handler: "test-handler"},
	)
	m := NewManager(conn, Options{PodLogsDirectory: t.TempDir(), Recorder: recorder, RuntimeClassManager: runtimeclass.NewManager(classes)})
	pod := func(uid, class string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid)},
			Spec: v1.PodSpec{RuntimeClassName: ptr.To(class), RestartPolicy: v1.RestartPolicyNever,
				Containers: []v1.Container{{Name: "c", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent}}},
		}
	}
	sync := func(p *v1.Pod) (container.PodSyncResult, *container.PodStatus) {
		status, err := m.GetPodStatus(ctx, p.UID, p.Name, p.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		result := m.SyncPod(ctx, p, status, flowcontrol.NewBackOff(time.Second, time.Second))
		status, err = m.GetPodStatus(ctx, p.UID, p.Name, p.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		return result, status
	}

	t.Run("a class whose handler the runtime has", func(t *testing.T) {
		result, status := sync(pod("known", "sim"))
		if result.Error() != nil || len(status.SandboxStatuses) != 1 || status.SandboxStatuses[0].GetRuntimeHandler() != sim.RuntimeName {
			t.Fatalf("SyncPod: %v; sandboxes %v", result.Error(), status.SandboxStatuses)
		}
	})
	for _, tc := range []struct {
		name, class, says string
	}{
		{"a class whose handler the runtime does not have", "elsewhere", `no runtime for "test-handler" is configured`},
		{"a class that does not exist", "missing", `runtimeclasses.node.k8s.io "missing" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, status := sync(pod(tc.class, tc.class))
			if len(status.SandboxStatuses) != 0 || result.Error() == nil {
				t.Fatalf("SyncPod: %v; sandboxes %v", result.Error(), status.SandboxStatuses)
			}
			var failed *container.SyncResult
			for _, r := range result.SyncResults {
				if r.Action == container.CreatePodSandbox {
					failed = r
				}
			}
			if failed == nil || failed.Error != container.ErrCreatePodSandbox || !strings.Contains(failed.Message, tc.says) {
				t.Errorf("sandbox result %+v", failed)
			}
			var events []string
		drain:
			for {
				select {
				case ev := <-recorder.Events:
					events = append(events, ev)
				default:
					break drain
				}
			}
			if len(events) == 0 || !strings.HasPrefix(events[len(events)-1], "Warning FailedCreatePodSandBox Failed to create pod sandbox: ") ||
				!strings.Contains(events[len(events)-1], tc.says) {
				t.Errorf("events %q, want a FailedCreatePodSandBox last", events)
			}
		})
	}
}
