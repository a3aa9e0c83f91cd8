package logs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
)

// TestRotateLogs runs a container on the sim runtime over real gRPC, grows
// its log past MaxSize and rotates it: the file is renamed, the runtime
// reopens a fresh one at the path, and only MaxFiles files are kept.
func TestRotateLogs(t *testing.T) {
	rt := sim.New()
	t.Cleanup(rt.Close)
	c := socketharness.Start(t, rt, rt)
	ctx := context.Background()
	logDir := t.TempDir()
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "uid"},
		LogDirectory: logDir,
	}
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	image := &runtimeapi.ImageSpec{Image: "busybox:1"}
	if _, err := c.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image}); err != nil {
		t.Fatal(err)
	}
	ctr, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: image, LogPath: "c/0.log"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, "c", "0.log")

	clk := testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m, err := NewContainerLogManager(c.Runtime, Config{MaxSize: 100, MaxFiles: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	grow := func() {
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(strings.Repeat("2026-01-02T03:04:05Z stdout F line\n", 5)); err != nil {
			t.Fatal(err)
		}
	}

	if err := m.RotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	if rotated, _ := filepath.Glob(logPath + ".*"); len(rotated) != 0 {
		t.Fatalf("a log under MaxSize was rotated: %v", rotated)
	}
	grow()
	if err := m.RotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	first := logPath + ".20260102-030405"
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("rotated file: %v", err)
	}
	if info, err := os.Stat(logPath); err != nil || info.Size() != 0 {
		t.Fatalf("the runtime did not reopen an empty log at %s: %v %v", logPath, info, err)
	}

	clk.Step(time.Minute)
	grow()
	if err := m.RotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	rotated, _ := filepath.Glob(logPath + ".*")
	if len(rotated) != 1 || rotated[0] != logPath+".20260102-030505" {
		t.Errorf("rotated files %v, want only the newest (MaxFiles 2 counts the live log)", rotated)
	}
	if _, err := NewContainerLogManager(c.Runtime, Config{MaxFiles: 1}); err == nil {
		t.Error("MaxFiles 1 was accepted")
	}
}
