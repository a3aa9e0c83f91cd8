package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/prober/results"
)

// newProcessManager serves a process runtime and returns a Manager speaking
// CRI to it, recording events in the returned recorder.
func newProcessManager(t *testing.T, opts Options) (*Manager, *record.FakeRecorder) {
	t.Helper()
	rt, err := process.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	conn, err := Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	recorder := record.NewFakeRecorder(100)
	opts.PodLogsDirectory, opts.Recorder = t.TempDir(), recorder
	return NewManager(conn, opts), recorder
}

func hookPod(c v1.Container) *v1.Pod {
	c.Image, c.ImagePullPolicy = "busybox", v1.PullIfNotPresent
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: "default", UID: "uid-hooks"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []v1.Container{c}},
	}
}

func syncOnce(t *testing.T, m *Manager, pod *v1.Pod) (container.PodSyncResult, *container.PodStatus) {
	t.Helper()
	ctx := context.Background()
	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	result := m.SyncPod(ctx, pod, status, flowcontrol.NewBackOff(time.Hour, time.Hour))
	status, err = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.KillPod(ctx, nil, container.ConvertPodStatusToRunningPod(m.Type(), status), ptr.To[int64](0))
	})
	return result, status
}

func drain(r *record.FakeRecorder) string {
	var events []string
	for {
		select {
		case e := <-r.Events:
			events = append(events, e)
		default:
			return strings.Join(events, "\n")
		}
	}
}

func TestPostStartHookRunsAfterStart(t *testing.T) {
	m, _ := newProcessManager(t, Options{})
	file := filepath.Join(t.TempDir(), "poststart")
	pod := hookPod(v1.Container{Name: "main", Command: []string{"sleep", "1000"}, Lifecycle: &v1.Lifecycle{
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo ok > " + file}}}}})
	result, status := syncOnce(t, m, pod)
	if err := result.Error(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "ok\n" {
		t.Errorf("postStart file %q, %v", b, err)
	}
	if s := status.FindContainerStatusByName("main"); s == nil || s.State != container.ContainerStateRunning {
		t.Errorf("container after a successful hook: %+v", s)
	}
}

func TestFailedPostStartHookKillsTheContainer(t *testing.T) {
	m, recorder := newProcessManager(t, Options{})
	pod := hookPod(v1.Container{Name: "main", Command: []string{"sleep", "1000"}, Lifecycle: &v1.Lifecycle{
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "exit 1"}}}}})
	result, status := syncOnce(t, m, pod)
	if err := result.Error(); err == nil || !strings.Contains(err.Error(), container.ErrPostStartHook.Error()) {
		t.Fatalf("SyncPod error %v, want %v", err, container.ErrPostStartHook)
	}
	if s := status.FindContainerStatusByName("main"); s == nil || s.State != container.ContainerStateExited {
		t.Errorf("container after a failed hook: %+v, want exited", s)
	}
	events := drain(recorder)
	for _, want := range []string{"Warning FailedPostStartHook Exec lifecycle hook ([sh -c exit 1])", "Normal Killing FailedPostStartHook"} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %q:\n%s", want, events)
		}
	}
}

func TestPreStopHookRunsBeforeStop(t *testing.T) {
	m, _ := newProcessManager(t, Options{})
	file := filepath.Join(t.TempDir(), "prestop")
	pod := hookPod(v1.Container{Name: "main", Command: []string{"sleep", "1000"}, Lifecycle: &v1.Lifecycle{
		PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo bye > " + file}}}}})
	_, status := syncOnce(t, m, pod)
	if err := m.KillPod(context.Background(), pod, container.ConvertPodStatusToRunningPod(m.Type(), status), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "bye\n" {
		t.Errorf("preStop file %q, %v", b, err)
	}
}

func TestFailedLivenessProbeRestartsTheContainer(t *testing.T) {
	liveness := results.NewManager()
	m, recorder := newProcessManager(t, Options{LivenessManager: liveness, StartupManager: results.NewManager()})
	pod := hookPod(v1.Container{Name: "main", Command: []string{"sleep", "1000"}, LivenessProbe: &v1.Probe{
		ProbeHandler:                  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"false"}}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
	}})
	_, status := syncOnce(t, m, pod)
	first := status.FindContainerStatusByName("main")
	liveness.Set(first.ID, results.Failure, pod)

	result, status := syncOnce(t, m, pod)
	if err := result.Error(); err != nil {
		t.Fatal(err)
	}
	if s := status.FindContainerStatusByName("main"); s == nil || s.ID == first.ID || s.State != container.ContainerStateRunning || s.RestartCount != 1 {
		t.Errorf("after a liveness failure: %+v, want a new running container (restart 1)", s)
	}
	if events := drain(recorder); !strings.Contains(events, "Normal Killing Container main failed liveness probe, will be restarted") {
		t.Errorf("events lack the Killing event:\n%s", events)
	}
}
