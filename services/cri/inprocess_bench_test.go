package cri_test

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
)

// BenchmarkInProcessGetPodStatus makes the calls the kubelet makes for one pod's status
// (ListPodSandbox and ListContainers by its UID label, PodSandboxStatus,
// ContainerStatus) over an InProcessConn to the hollow sim runtime.
func BenchmarkInProcessGetPodStatus(b *testing.B) {
	rt := sim.NewHollow()
	b.Cleanup(rt.Close)
	conn := cri.NewInProcessConn(rt, rt)
	runtime := runtimeapi.NewRuntimeServiceClient(conn)
	images := runtimeapi.NewImageServiceClient(conn)
	ctx := context.Background()
	if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{"io.kubernetes.pod.uid": "u1", "io.kubernetes.pod.name": "p", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.container.name": "c"}
	annotations := map[string]string{"io.kubernetes.container.hash": "1", "io.kubernetes.container.restartCount": "0", "io.kubernetes.container.terminationMessagePath": "/dev/termination-log", "io.kubernetes.container.terminationMessagePolicy": "File", "io.kubernetes.pod.terminationGracePeriod": "30"}
	config := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}, Labels: labels, Annotations: annotations}
	run, err := runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config})
	if err != nil {
		b.Fatal(err)
	}
	c, err := runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, SandboxConfig: config,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Labels: labels, Annotations: annotations}})
	if err != nil {
		b.Fatal(err)
	}
	byPod := map[string]string{"io.kubernetes.pod.uid": "u1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: byPod}}); err != nil {
			b.Fatal(err)
		}
		if _, err := runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: byPod}}); err != nil {
			b.Fatal(err)
		}
		if _, err := runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId}); err != nil {
			b.Fatal(err)
		}
		if _, err := runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId}); err != nil {
			b.Fatal(err)
		}
	}
}
