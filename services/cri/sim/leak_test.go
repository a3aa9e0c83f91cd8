package sim

import (
	"context"
	goruntime "runtime"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestCloseLeavesNoGoroutines calls the service directly, without gRPC, so
// the goroutine count reflects only the runtime's own goroutines: pending
// run-time timers and start delays must all be gone after Close.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := goruntime.NumGoroutine()
	r := New()
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	create := func(name string, annotations map[string]string) string {
		c, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: name},
			Image:       &runtimeapi.ImageSpec{Image: "busybox"},
			Annotations: annotations,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return c.ContainerId
	}
	for _, name := range []string{"a", "b"} {
		id := create(name, map[string]string{AnnotationRunTime: "1h"})
		if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	delayed := create("delayed", map[string]string{AnnotationStartDelay: "1h"})
	startErr := make(chan error, 1)
	go func() {
		_, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: delayed})
		startErr <- err
	}()

	r.Close()
	if err := <-startErr; err == nil {
		t.Error("a start delayed past Close succeeded")
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return goruntime.NumGoroutine() <= before, nil
	}); err != nil {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", goruntime.NumGoroutine(), before, buf[:goruntime.Stack(buf, true)])
	}
}
