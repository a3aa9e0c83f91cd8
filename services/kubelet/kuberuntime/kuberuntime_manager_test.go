package kuberuntime

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/runtime/critest"
	"skiff.dev/services/runtime/sim"
)

func TestCRITarget(t *testing.T) {
	tests := []struct {
		endpoint, want string
		wantErr        bool
	}{
		{"unix:///run/x.sock", "unix:///run/x.sock", false},
		{"/run/x.sock", "unix:///run/x.sock", false},
		{"x.sock", "unix:x.sock", false},
		{"tcp://1.2.3.4:5", "dns:///1.2.3.4:5", false},
		{"tcp://localhost:2376", "dns:///localhost:2376", false},
		{"tcp://1.2.3.4", "", true},
		{"http://1.2.3.4:5", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := criTarget(tt.endpoint)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("criTarget(%q) = %q, %v; want %q, err=%v", tt.endpoint, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestApplyDefaultImageTag(t *testing.T) {
	tests := map[string]string{
		"busybox":                      "busybox:latest",
		"busybox:1.36":                 "busybox:1.36",
		"localhost:5000/app":           "localhost:5000/app:latest",
		"localhost:5000/app:v1":        "localhost:5000/app:v1",
		"busybox@sha256:0123456789abc": "busybox@sha256:0123456789abc",
	}
	for in, want := range tests {
		if got := applyDefaultImageTag(in); got != want {
			t.Errorf("applyDefaultImageTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandEnv(t *testing.T) {
	vars := map[string]string{"A": "x", "B": "y"}
	tests := map[string]string{
		"plain":        "plain",
		"$(A)-$(B)":    "x-y",
		"$(MISSING)":   "$(MISSING)",
		"$$(A)":        "$(A)",
		"cost $5":      "cost $5",
		"unclosed $(A": "unclosed $(A",
	}
	for in, want := range tests {
		if got := expandEnv(in, vars); got != want {
			t.Errorf("expandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMakeEnvironmentVariables(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"app": "web"}},
		Spec:       v1.PodSpec{NodeName: "n1"},
	}
	c := &v1.Container{Env: []v1.EnvVar{
		{Name: "PLAIN", Value: "v"},
		{Name: "NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "APP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "BOTH", Value: "$(NAME).$(NS)"},
	}}
	envs, err := makeEnvironmentVariables(pod, c, []string{"10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range envs {
		got[e.GetKey()] = string(e.GetValue())
	}
	want := map[string]string{"PLAIN": "v", "NAME": "p", "NS": "ns", "IP": "10.0.0.7", "APP": "web", "BOTH": "p.ns"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("env %s = %q, want %q", k, got[k], v)
		}
	}

	secret := &v1.Container{Env: []v1.EnvVar{{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}}}
	if _, err := makeEnvironmentVariables(pod, secret, nil); err == nil {
		t.Error("secretKeyRef should be refused")
	}
}

// newSimManager serves a sim runtime on a unix socket and returns a Manager
// speaking CRI to it.
func newSimManager(t *testing.T) (*Manager, string) {
	t.Helper()
	rt := sim.New()
	t.Cleanup(rt.Close)
	cri := critest.Start(t, rt, rt)
	conn, err := Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	logs := t.TempDir()
	return NewManager(conn, Options{PodLogsDirectory: logs}), logs
}

func TestSyncPodRunsAndKillsAPodOnARealRuntime(t *testing.T) {
	ctx := context.Background()
	m, logs := newSimManager(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "x"}},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{{
				Name: "main", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sh", "-c"}, Args: []string{"echo $(GREETING)"},
				Env: []v1.EnvVar{{Name: "GREETING", Value: "hi"}}, WorkingDir: "/srv",
			}},
		},
	}
	backOff := flowcontrol.NewBackOff(10*time.Second, 300*time.Second)

	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if result := m.SyncPod(ctx, pod, status, backOff); result.Error() != nil {
		t.Fatalf("SyncPod: %v", result.Error())
	}

	status, err = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.SandboxStatuses) != 1 || status.SandboxStatuses[0].GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandboxes = %v", status.SandboxStatuses)
	}
	sb := status.SandboxStatuses[0]
	if sb.GetMetadata().GetName() != "web" || sb.GetMetadata().GetUid() != "uid-1" || sb.GetLabels()[KubernetesPodUIDLabel] != "uid-1" ||
		sb.GetLabels()["app"] != "web" || sb.GetAnnotations()["note"] != "x" {
		t.Errorf("sandbox metadata/labels/annotations: %v %v %v", sb.GetMetadata(), sb.GetLabels(), sb.GetAnnotations())
	}
	if len(status.IPs) == 0 {
		t.Errorf("no pod IP")
	}
	c := status.FindContainerStatusByName("main")
	if c == nil || c.State != container.ContainerStateRunning || c.RestartCount != 0 || c.ID.Type != sim.RuntimeName {
		t.Fatalf("container status %+v", c)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.runtimeService.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ID.ID, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	wantLog := filepath.Join(logs, "default_web_uid-1", "main", "0.log")
	if got := resp.GetStatus().GetLogPath(); got != wantLog {
		t.Errorf("log path = %q, want %q", got, wantLog)
	}
	if _, err := os.Stat(filepath.Dir(wantLog)); err != nil {
		t.Errorf("container log directory: %v", err)
	}
	if got := resp.GetStatus().GetLabels()[KubernetesContainerNameLabel]; got != "main" {
		t.Errorf("container name label = %q", got)
	}

	// A second sync with the new view changes nothing.
	if result := m.SyncPod(ctx, pod, status, backOff); result.Error() != nil || len(result.SyncResults) != 0 {
		t.Errorf("second SyncPod did something: %+v", result.SyncResults)
	}

	if err := m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), status), nil); err != nil {
		t.Fatal(err)
	}
	pods, err := m.GetPods(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 0 {
		t.Errorf("running pods after KillPod: %+v", pods[0])
	}
}

func TestGarbageCollectRemovesEverythingOfAGonePod(t *testing.T) {
	ctx := context.Background()
	m, logs := newSimManager(t)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	status, _ := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if result := m.SyncPod(ctx, pod, status, flowcontrol.NewBackOff(time.Second, time.Second)); result.Error() != nil {
		t.Fatal(result.Error())
	}
	status, _ = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)

	// A live pod keeps its running container and ready sandbox.
	if err := m.GarbageCollect(ctx, gone(false), true); err != nil {
		t.Fatal(err)
	}
	if pods, _ := m.GetPods(ctx, true); len(pods) != 1 || len(pods[0].Containers) != 1 || len(pods[0].Sandboxes) != 1 {
		t.Fatalf("GC touched a live pod: %+v", pods)
	}

	if err := m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), status), nil); err != nil {
		t.Fatal(err)
	}
	if err := m.GarbageCollect(ctx, gone(true), true); err != nil {
		t.Fatal(err)
	}
	if pods, _ := m.GetPods(ctx, true); len(pods) != 0 {
		t.Errorf("left after GC: %+v", pods)
	}
	entries, _ := os.ReadDir(logs)
	for _, e := range entries {
		if strings.Contains(e.Name(), string(pod.UID)) {
			t.Errorf("log directory %s left after GC", e.Name())
		}
	}
}

// gone answers ShouldPodContentBeRemoved with its value for every pod.
type gone bool

func (g gone) ShouldPodContentBeRemoved(types.UID) bool { return bool(g) }

// TestDialTCPEndpoint reaches a CRI runtime served on loopback TCP, as a
// containerd listening on tcp://HOST:PORT is.
func TestDialTCPEndpoint(t *testing.T) {
	rt := sim.New()
	t.Cleanup(rt.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	runtimeapi.RegisterImageServiceServer(srv, rt)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := Dial("tcp://" + l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := NewManager(conn, Options{PodLogsDirectory: t.TempDir()})
	if _, err := m.Version(context.Background()); err != nil {
		t.Errorf("CRI Version over TCP: %v", err)
	}
}
