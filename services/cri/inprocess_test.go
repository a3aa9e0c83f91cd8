package cri_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/criservice"
	"skiff.dev/services/cri/sim"
)

// hollowClients starts a hollow sim runtime and returns it with the generated CRI
// clients to it over an InProcessConn.
func hollowClients(tb testing.TB) (*sim.Runtime, runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	rt := sim.NewHollow()
	tb.Cleanup(rt.Close)
	conn := cri.NewInProcessConn(rt, rt)
	return rt, runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

// TestInProcessConn drives the sim runtime through the generated CRI clients over an
// InProcessConn: calls reach the server, the server gets a copy of each request, a reply
// shares the response's parts (uncopied), and errors arrive as the gRPC statuses a
// socket would carry.
func TestInProcessConn(t *testing.T) {
	rt, runtime, images := hollowClients(t)
	ctx := context.Background()

	v, err := runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != sim.RuntimeName {
		t.Fatalf("Version = %v, %v; want runtime %q", v, err, sim.RuntimeName)
	}
	if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatalf("PullImage: %v", err)
	}

	config := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}}
	run, err := runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	// The server got a copy: the caller's request is its own to change afterwards.
	config.Metadata.Name = "changed"
	list, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v; want one sandbox", list, err)
	}
	if got := list.Items[0].Metadata.Name; got != "p" {
		t.Fatalf("sandbox name = %q after the caller changed its request; want %q", got, "p")
	}
	// The reply is the caller's message, but what it points to is shared with the server
	// (read-only for the caller): a second call answers a new reply with the same parts.
	again, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || again == list || len(again.Items) != 1 || again.Items[0].Id != run.PodSandboxId {
		t.Fatalf("ListPodSandbox again = %v, %v; want a new reply listing sandbox %s", again, err, run.PodSandboxId)
	}
	if again.Items[0].Metadata != list.Items[0].Metadata {
		t.Fatalf("two replies hold different copies of the sandbox's metadata; want the server's own, uncopied")
	}

	_, err = runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus of an unknown container: %v; want NotFound", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := runtime.Version(cancelled, &runtimeapi.VersionRequest{}); status.Code(err) != codes.Canceled {
		t.Fatalf("Version with a cancelled context: %v; want Canceled", err)
	}
	onlyRuntime := runtimeapi.NewImageServiceClient(cri.NewInProcessConn(rt, nil))
	if _, err := onlyRuntime.ListImages(ctx, &runtimeapi.ListImagesRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListImages without an image server: %v; want Unimplemented", err)
	}
}

// nilVersionServer is a test double of a broken runtime: its Version answers neither a
// response nor an error.
type nilVersionServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (nilVersionServer) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return nil, nil
}

func TestInProcessConnRefusesANilResponse(t *testing.T) {
	client := runtimeapi.NewRuntimeServiceClient(cri.NewInProcessConn(nilVersionServer{}, nil))
	if _, err := client.Version(context.Background(), &runtimeapi.VersionRequest{}); status.Code(err) != codes.Internal {
		t.Fatalf("Version from a server that returned nothing: %v; want Internal", err)
	}
}

// TestInProcessConnStreams reads the sim runtime's container events over an
// InProcessConn: headers arrive once the runtime has subscribed, events arrive as
// copies, a subscriber that stops reading is cut off rather than blocking the runtime,
// and cancelling the caller's context ends the stream.
func TestInProcessConnStreams(t *testing.T) {
	rt := sim.NewHollow()
	t.Cleanup(rt.Close)
	runtime := runtimeapi.NewRuntimeServiceClient(cri.NewInProcessConn(rt, rt))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	stream, err := runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("Header: %v", err)
	}
	run := func(name string) string {
		t.Helper()
		config := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: "uid-" + name}}
		r, err := runtime.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: config})
		if err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		return r.PodSandboxId
	}
	id := run("p")
	e, err := stream.Recv()
	if err != nil || e.ContainerId != id || e.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT {
		t.Fatalf("first event = %v, %v; want CREATED of %s", e, err, id)
	}
	// A copy: changing it changes nothing the runtime keeps.
	e.PodSandboxStatus.Metadata.Name = "mine"
	st, err := runtime.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil || st.Status.Metadata.Name != "p" {
		t.Fatalf("PodSandboxStatus after changing an event = %v, %v; want name p", st, err)
	}

	// Stop reading: the runtime queues criservice.EventBufferSize events (plus the
	// one the stream holds), then ends the stream instead of waiting.
	for i := range criservice.EventBufferSize/2 + 2 {
		run(fmt.Sprintf("q%d", i))
	}
	var n int
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		n++
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after %d events unread: %v; want ResourceExhausted", n, err)
	}

	again, err := runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Header(); err != nil {
		t.Fatalf("Header: %v", err)
	}
	cancel()
	if _, err := again.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after the caller cancelled: %v; want Canceled", err)
	}
}

// BenchmarkInProcessGetPodStatus makes the calls the kubelet makes for one pod's status
// (ListPodSandbox and ListContainers by its UID label, PodSandboxStatus,
// ContainerStatus) over an InProcessConn to the hollow sim runtime.
func BenchmarkInProcessGetPodStatus(b *testing.B) {
	_, runtime, images := hollowClients(b)
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
