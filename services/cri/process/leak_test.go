package process

import (
	"context"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestCloseLeavesNoGoroutines calls the service directly, without gRPC, so
// the goroutine count reflects only the runtime's own goroutines.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := goruntime.NumGoroutine()
	r, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u"},
		LogDirectory: filepath.Join(t.TempDir(), "logs"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		c, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: "busybox"},
			Command:  []string{"sh", "-c", "sleep 1000 & echo started; wait"},
			LogPath:  name + ".log",
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()

	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return goruntime.NumGoroutine() <= before, nil
	}); err != nil {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", goruntime.NumGoroutine(), before, buf[:goruntime.Stack(buf, true)])
	}
}
