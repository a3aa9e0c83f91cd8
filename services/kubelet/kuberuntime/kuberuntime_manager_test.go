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

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
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

func TestGenerateContainerConfigResourcesByQoS(t *testing.T) {
	const memoryCapacity = 4 << 30
	res := func(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
		list := func(cpu, mem string) v1.ResourceList {
			l := v1.ResourceList{}
			if cpu != "" {
				l[v1.ResourceCPU] = resource.MustParse(cpu)
			}
			if mem != "" {
				l[v1.ResourceMemory] = resource.MustParse(mem)
			}
			return l
		}
		return v1.ResourceRequirements{Requests: list(cpuReq, memReq), Limits: list(cpuLim, memLim)}
	}
	tests := []struct {
		name string
		res  v1.ResourceRequirements
		want *runtimeapi.LinuxContainerResources
	}{
		{"BestEffort: minimum shares, no quota, no memory limit, first to be OOM-killed", res("", "", "", ""),
			&runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000}},
		{"Guaranteed: shares and quota from one core, memory limit, last to be OOM-killed", res("1", "1Gi", "1", "1Gi"),
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 1 << 30, OomScoreAdj: -997}},
		{"Burstable: shares from the request, quota from the limit, OOM score from the memory request", res("250m", "1Gi", "500m", "2Gi"),
			&runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 2 << 30, OomScoreAdj: 750}},
		{"only a CPU limit: shares from the limit", res("", "", "100m", ""),
			&runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 10000, OomScoreAdj: 999}},
		{"a tiny CPU limit still gets the 1 ms minimum quota", res("1m", "", "1m", ""),
			&runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: 1000, OomScoreAdj: 999}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Manager{runtimeHelper: plainRuntimeHelper{}, memoryCapacity: memoryCapacity, podLogsDirectory: t.TempDir()}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: tt.res}}}}
			cfg, err := m.generateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, "img", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.GetLinux().GetResources(); !proto.Equal(got, tt.want) {
				t.Errorf("resources = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGenerateContainerConfigMountsAndExpansion(t *testing.T) {
	bidirectional, hostToContainer := v1.MountPropagationBidirectional, v1.MountPropagationHostToContainer
	helper := &recordingHelper{opts: &container.RunContainerOptions{
		Envs: []container.EnvVar{{Name: "GREETING", Value: "hello"}, {Name: "WHO", Value: "world"}},
		Mounts: []container.Mount{
			{Name: "cfg", ContainerPath: "/etc/app", HostPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/cfg", ReadOnly: true},
			{Name: "scratch", ContainerPath: "/tmp/s", HostPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/scratch", Propagation: &hostToContainer},
		},
	}, cgroupParent: "/kubepods/besteffort/podu"}
	m := &Manager{runtimeHelper: helper, podLogsDirectory: t.TempDir()}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Command: []string{"echo", "$(GREETING)"}, Args: []string{"$(WHO)", "$$(WHO)", "$(NOPE)"}}}}}
	cfg, err := m.generateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, "img", []string{"10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(append(cfg.GetCommand(), cfg.GetArgs()...), " "); got != "echo hello world $(WHO) $(NOPE)" {
		t.Errorf("command and args = %q", got)
	}
	want := []*runtimeapi.Mount{
		{ContainerPath: "/etc/app", HostPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/cfg", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
		{ContainerPath: "/tmp/s", HostPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/scratch", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
	}
	if len(cfg.GetMounts()) != len(want) {
		t.Fatalf("mounts = %v", cfg.GetMounts())
	}
	for i := range want {
		if !proto.Equal(cfg.GetMounts()[i], want[i]) {
			t.Errorf("mount %d = %v, want %v", i, cfg.GetMounts()[i], want[i])
		}
	}
	if sc, err := m.generatePodSandboxConfig(pod, 0); err != nil || sc.GetLinux().GetCgroupParent() != "/kubepods/besteffort/podu" {
		t.Errorf("sandbox cgroup_parent = %q", sc.GetLinux().GetCgroupParent())
	}

	helper.opts.Mounts[1].Propagation = &bidirectional
	if _, err := m.generateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, "img", nil); err == nil || !strings.Contains(err.Error(), "only to privileged containers") {
		t.Errorf("Bidirectional propagation in an unprivileged container: err = %v", err)
	}
}

// recordingHelper is a RuntimeHelper returning fixed options, standing in
// for the kubelet, which owns the real one.
type recordingHelper struct {
	opts         *container.RunContainerOptions
	cgroupParent string
}

func (h *recordingHelper) GenerateRunContainerOptions(context.Context, *v1.Pod, *v1.Container, []string) (*container.RunContainerOptions, error) {
	return h.opts, nil
}

func (h *recordingHelper) GetPodCgroupParent(*v1.Pod) string { return h.cgroupParent }

func TestPlainRuntimeHelperRefusesWhatNeedsTheKubelet(t *testing.T) {
	c := &v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "$(A)-y"}}}
	opts, err := plainRuntimeHelper{}.GenerateRunContainerOptions(context.Background(), &v1.Pod{}, c, nil)
	if err != nil || len(opts.Envs) != 2 || opts.Envs[1].Value != "x-y" {
		t.Fatalf("plain env: %+v, %v", opts, err)
	}
	c.Env = append(c.Env, v1.EnvVar{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}})
	if _, err := (plainRuntimeHelper{}).GenerateRunContainerOptions(context.Background(), &v1.Pod{}, c, nil); err == nil {
		t.Error("valueFrom was accepted without the kubelet")
	}
}

// newSimManager serves a sim runtime on a unix socket and returns a Manager
// speaking CRI to it.
func newSimManager(t *testing.T) (*Manager, string) {
	t.Helper()
	rt := sim.New()
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
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
	if sb.GetMetadata().GetName() != "web" || sb.GetMetadata().GetUid() != "uid-1" || sb.GetLabels()[kubetypes.KubernetesPodUIDLabel] != "uid-1" ||
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
	if got := resp.GetStatus().GetLabels()[kubetypes.KubernetesContainerNameLabel]; got != "main" {
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
