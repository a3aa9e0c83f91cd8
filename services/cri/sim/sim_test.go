package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
)

const waitTimeout = 20 * time.Second

type env struct {
	t       *testing.T
	rt      *sim.Runtime
	c       *socketharness.Clients
	ctx     context.Context
	counter int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rt := sim.New()
	c := socketharness.Start(t, rt, rt)
	t.Cleanup(rt.Close)
	return &env{t: t, rt: rt, c: c, ctx: context.Background()}
}

func (e *env) sandbox(annotations map[string]string, edit ...func(*runtimeapi.PodSandboxConfig)) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	e.counter++
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d", e.counter), Namespace: "default", Uid: fmt.Sprintf("uid-%d", e.counter)},
		LogDirectory: filepath.Join(e.t.TempDir(), "pods"),
		Annotations:  annotations,
	}
	for _, f := range edit {
		f(cfg)
	}
	resp, err := e.c.Runtime.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.PodSandboxId, cfg
}

func (e *env) tryCreate(sbID string, sbCfg *runtimeapi.PodSandboxConfig, name string, annotations map[string]string) (string, error) {
	if _, err := e.c.Image.PullImage(e.ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "nginx:1.27"}}); err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.c.Runtime.CreateContainer(e.ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sbID,
		SandboxConfig: sbCfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: name},
			Image:       &runtimeapi.ImageSpec{Image: "nginx:1.27"},
			Annotations: annotations,
			LogPath:     name + "/0.log",
		},
	})
	if err != nil {
		return "", err
	}
	return resp.ContainerId, nil
}

func (e *env) create(sbID string, sbCfg *runtimeapi.PodSandboxConfig, name string, annotations map[string]string) string {
	e.t.Helper()
	id, err := e.tryCreate(sbID, sbCfg, name, annotations)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) start(id string) {
	e.t.Helper()
	if _, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) status(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	resp, err := e.c.Runtime.ContainerStatus(e.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Status
}

func (e *env) waitExited(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	var st *runtimeapi.ContainerStatus
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		st = e.status(id)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, nil
	}); err != nil {
		e.t.Fatalf("container %s still %s", id, st.State)
	}
	return st
}

func (e *env) podIP(sbID string) string {
	e.t.Helper()
	resp, err := e.c.Runtime.PodSandboxStatus(e.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbID})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Status.GetNetwork().GetIp()
}

func logLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range bytes.Lines(data) {
		entry, err := criolog.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %s", entry.Stream, entry.Tag, entry.Content))
	}
	return out
}

func TestVersion(t *testing.T) {
	e := newEnv(t)
	v, err := e.c.Runtime.Version(e.ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "skiff-sim" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion != "0.1.0" {
		t.Errorf("Version = %v", v)
	}
}

func TestContainerRunsUntilStopped(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(nil)
	forever := e.create(sbID, sbCfg, "forever", nil)
	brief := e.create(sbID, sbCfg, "brief", map[string]string{sim.AnnotationRunTime: "1ms"})
	e.start(forever)
	e.start(brief)

	e.waitExited(brief)
	if st := e.status(forever); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container without run time is %s after a sibling with one exited, want RUNNING", st.State)
	}
	if _, err := e.c.Runtime.StopContainer(e.ctx, &runtimeapi.StopContainerRequest{ContainerId: forever, Timeout: 30}); err != nil {
		t.Fatal(err)
	}
	st := e.status(forever)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 0 || st.Reason != "Completed" {
		t.Errorf("after stop: %s exit %d %q, want EXITED 0 Completed", st.State, st.ExitCode, st.Reason)
	}
	want := []string{"stdout F sim: started docker.io/library/nginx:1.27", "stdout F sim: exited 0"}
	if got := logLines(t, st.LogPath); !slices.Equal(got, want) {
		t.Errorf("log = %q, want %q", got, want)
	}
}

func TestAnnotationsScriptTheExit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pod        map[string]string
		container  map[string]string
		wantCode   int32
		wantReason string
	}{
		{
			name:      "on the container",
			container: map[string]string{sim.AnnotationRunTime: "10ms", sim.AnnotationExitCode: "3"},
			wantCode:  3, wantReason: "Error",
		},
		{
			name:     "on the pod",
			pod:      map[string]string{sim.AnnotationRunTime: "10ms", sim.AnnotationExitCode: "42"},
			wantCode: 42, wantReason: "Error",
		},
		{
			name:     "exit code defaults to 0",
			pod:      map[string]string{sim.AnnotationRunTime: "10ms"},
			wantCode: 0, wantReason: "Completed",
		},
		{
			name:     "per-container pod annotation wins over the pod-wide one",
			pod:      map[string]string{sim.AnnotationRunTime: "10ms", sim.AnnotationExitCode: "1", sim.AnnotationExitCode + ".main": "7"},
			wantCode: 7, wantReason: "Error",
		},
		{
			name:      "container annotation wins over the pod's",
			pod:       map[string]string{sim.AnnotationRunTime: "10ms", sim.AnnotationExitCode: "1"},
			container: map[string]string{sim.AnnotationExitCode: "0"},
			wantCode:  0, wantReason: "Completed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sbID, sbCfg := e.sandbox(tc.pod)
			id := e.create(sbID, sbCfg, "main", tc.container)
			e.start(id)
			st := e.waitExited(id)
			if st.ExitCode != tc.wantCode || st.Reason != tc.wantReason {
				t.Errorf("exit %d %q, want %d %q", st.ExitCode, st.Reason, tc.wantCode, tc.wantReason)
			}
			if st.FinishedAt < st.StartedAt {
				t.Errorf("finished %d before started %d", st.FinishedAt, st.StartedAt)
			}
			if got, want := logLines(t, st.LogPath), fmt.Sprintf("stdout F sim: exited %d", tc.wantCode); !slices.Contains(got, want) {
				t.Errorf("log = %q, want a line %q", got, want)
			}
		})
	}
}

func TestStartDelay(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(map[string]string{sim.AnnotationStartDelay: "20ms"})
	id := e.create(sbID, sbCfg, "main", nil)
	e.start(id)
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after a delayed StartContainer returned: %s, want RUNNING", st.State)
	}
}

func TestAbandonedStartIsAStartError(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(map[string]string{sim.AnnotationStartDelay: "1h"})
	id := e.create(sbID, sbCfg, "main", nil)
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	_, err := e.c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("StartContainer past its deadline: %v, want DeadlineExceeded", err)
	}
	st := e.waitExited(id)
	if st.Reason != "StartError" || st.ExitCode != 128 {
		t.Errorf("abandoned start: exit %d %q, want 128 StartError", st.ExitCode, st.Reason)
	}
}

func TestRemoveEndsADelayedStart(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(map[string]string{sim.AnnotationStartDelay: "1h"})
	id := e.create(sbID, sbCfg, "main", nil)
	started := make(chan error, 1)
	go func() {
		_, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		started <- err
	}()
	// Whether the removal lands before the start begins or during its delay,
	// the start fails instead of running for an hour.
	if _, err := e.c.Runtime.RemoveContainer(e.ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err == nil {
		t.Error("StartContainer of a removed container succeeded")
	}
}

func TestInvalidAnnotationIsInvalidArgument(t *testing.T) {
	e := newEnv(t)
	for _, ann := range []map[string]string{
		{sim.AnnotationRunTime: "soon"},
		{sim.AnnotationStartDelay: "-1s"},
		{sim.AnnotationExitCode: "256"},
	} {
		sbID, sbCfg := e.sandbox(ann)
		if _, err := e.tryCreate(sbID, sbCfg, "main", nil); status.Code(err) != codes.InvalidArgument {
			t.Errorf("CreateContainer with %v: %v, want InvalidArgument", ann, err)
		}
	}
}

func TestPodIPs(t *testing.T) {
	e := newEnv(t)
	cidr := netip.MustParsePrefix(sim.PodCIDR)
	seen := map[string]bool{}
	for range 3 {
		sbID, _ := e.sandbox(nil)
		ip := e.podIP(sbID)
		addr, err := netip.ParseAddr(ip)
		if err != nil || !cidr.Contains(addr) {
			t.Errorf("pod IP %q is not in %s", ip, cidr)
		}
		if seen[ip] {
			t.Errorf("pod IP %s handed out twice", ip)
		}
		seen[ip] = true
	}

	hostNet, _ := e.sandbox(nil, func(c *runtimeapi.PodSandboxConfig) {
		c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}}
	})
	if ip := e.podIP(hostNet); ip != "" {
		t.Errorf("host-network sandbox got pod IP %q, want none", ip)
	}
	resp, err := e.c.Runtime.PodSandboxStatus(e.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: hostNet})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Status.GetLinux().GetNamespaces().GetOptions().GetNetwork(); got != runtimeapi.NamespaceMode_NODE {
		t.Errorf("host-network sandbox reports network namespace mode %s, want NODE", got)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	e := newEnv(t)
	sbID, sbCfg := e.sandbox(map[string]string{sim.AnnotationRunTime: "1h"})
	var ids []string
	for _, name := range []string{"a", "b"} {
		id := e.create(sbID, sbCfg, name, nil)
		e.start(id)
		ids = append(ids, id)
	}
	e.rt.Close() // returns only once the run-time timers are cancelled
	for _, id := range ids {
		if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s is %s after Close, want EXITED", id, st.State)
		}
	}
	if _, err := e.c.Runtime.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: e.create(sbID, sbCfg, "late", nil)}); status.Code(err) != codes.Unavailable {
		t.Errorf("StartContainer after Close: %v, want Unavailable", err)
	}
}

// TestNetworkReadyOnceThePodCIDRIsHandedOver: New's network is not ready (reason
// NetworkPluginNotReady) until UpdateRuntimeConfig brings a pod CIDR, as kubenet's;
// a hollow node's is ready at once.
func TestNetworkReadyOnceThePodCIDRIsHandedOver(t *testing.T) {
	ctx := context.Background()
	networkReady := func(c *socketharness.Clients) *runtimeapi.RuntimeCondition {
		t.Helper()
		resp, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range resp.GetStatus().GetConditions() {
			if cond.GetType() == runtimeapi.NetworkReady {
				return cond
			}
		}
		t.Fatal("no NetworkReady condition")
		return nil
	}
	e := newEnv(t)
	if c := networkReady(e.c); c.GetStatus() || c.GetReason() != "NetworkPluginNotReady" {
		t.Errorf("before a pod CIDR: NetworkReady %v %s, want false NetworkPluginNotReady", c.GetStatus(), c.GetReason())
	}
	if _, err := e.c.Runtime.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.3.0/24"}}}); err != nil {
		t.Fatal(err)
	}
	if c := networkReady(e.c); !c.GetStatus() {
		t.Errorf("after UpdateRuntimeConfig: NetworkReady false (%s)", c.GetMessage())
	}

	hollow := sim.NewHollow()
	t.Cleanup(hollow.Close)
	if c := networkReady(socketharness.Start(t, hollow, hollow)); !c.GetStatus() {
		t.Errorf("hollow node: NetworkReady false (%s), want true at once", c.GetMessage())
	}
}
