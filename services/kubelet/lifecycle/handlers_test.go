package lifecycle_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/kuberuntime"
	"skiff.dev/services/kubelet/lifecycle"
)

// runningContainer runs a pod with one `sleep` container on the process
// runtime and returns the kuberuntime Manager (the hooks' command runner
// and pod status provider), the pod and the container's id.
func runningContainer(t *testing.T) (*kuberuntime.Manager, *v1.Pod, container.ContainerID) {
	t.Helper()
	ctx := context.Background()
	rt, err := process.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	conn, err := kuberuntime.Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := kuberuntime.NewManager(conn, kuberuntime.Options{PodLogsDirectory: t.TempDir()})
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hooked", Namespace: "default", UID: "uid-hooked"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
			Name: "main", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "1000"},
		}}},
	}
	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if result := m.SyncPod(ctx, pod, status, flowcontrol.NewBackOff(time.Second, time.Second)); result.Error() != nil {
		t.Fatal(result.Error())
	}
	status, err = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil || len(status.ContainerStatuses) != 1 {
		t.Fatalf("pod status: %v %+v", err, status)
	}
	t.Cleanup(func() {
		_ = m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), status), ptr.To[int64](0))
	})
	return m, pod, status.ContainerStatuses[0].ID
}

func TestHandlerRunner(t *testing.T) {
	m, pod, id := runningContainer(t)
	runner := lifecycle.NewHandlerRunner(m, m, "v1.32.4")
	dir := t.TempDir()

	var gotPath, gotUA string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotUA = r.URL.Path, r.UserAgent()
	}))
	t.Cleanup(srv.Close)
	srvPort := srv.Listener.Addr().(*net.TCPAddr).Port

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	for _, tc := range []struct {
		name    string
		ctx     context.Context
		handler v1.LifecycleHandler
		wantMsg string // "" means success
		check   func(t *testing.T)
	}{
		{name: "exec runs in the container", handler: v1.LifecycleHandler{Exec: &v1.ExecAction{
			Command: []string{"sh", "-c", "echo started > " + filepath.Join(dir, "hook")}}},
			check: func(t *testing.T) {
				if b, err := os.ReadFile(filepath.Join(dir, "hook")); err != nil || string(b) != "started\n" {
					t.Errorf("hook file: %q, %v", b, err)
				}
			}},
		{name: "exec non-zero exit fails with kube's message", handler: v1.LifecycleHandler{Exec: &v1.ExecAction{
			Command: []string{"sh", "-c", "echo nope; exit 3"}}},
			wantMsg: `Exec lifecycle hook ([sh -c echo nope; exit 3]) for Container "main" in Pod "hooked_default(uid-hooked)" failed - error: command terminated with exit code 3, message: "nope\n"`},
		{name: "httpGet reaches the server with kube-lifecycle's User-Agent", handler: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Path: "/started", Port: intstr.FromInt32(int32(srvPort))}},
			check: func(t *testing.T) {
				if gotPath != "/started" || gotUA != "kube-lifecycle/1.32" {
					t.Errorf("server saw path %q user agent %q", gotPath, gotUA)
				}
			}},
		{name: "httpGet to nothing fails", handler: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Path: "/x", Port: intstr.FromInt32(1)}},
			wantMsg: `HTTP lifecycle hook (/x) for Container "main" in Pod "hooked_default(uid-hooked)" failed - error:`},
		{name: "sleep cut short fails", ctx: cancelled, handler: v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 30}},
			wantMsg: "Sleep lifecycle hook (30) for Container \"main\" in Pod \"hooked_default(uid-hooked)\" failed - error: container terminated before sleep hook finished"},
		{name: "no handler is refused", handler: v1.LifecycleHandler{}, wantMsg: "Cannot run handler: invalid handler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			msg, err := runner.Run(ctx, id, pod, &pod.Spec.Containers[0], &tc.handler)
			if (err != nil) != (tc.wantMsg != "") || !strings.HasPrefix(msg, tc.wantMsg) {
				t.Fatalf("Run = %q, %v; want message %q", msg, err, tc.wantMsg)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
