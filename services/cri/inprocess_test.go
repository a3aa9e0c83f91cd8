package cri_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri"
	"skiff.dev/services/cri/sim"
)

// TestInProcessConn drives the sim runtime through the generated CRI clients over an
// InProcessConn: calls reach the server, messages are copies on both sides, and errors
// arrive as the gRPC statuses a socket would carry.
func TestInProcessConn(t *testing.T) {
	rt := sim.NewHollow()
	t.Cleanup(rt.Close)
	conn := cri.NewInProcessConn(rt, rt)
	runtime := runtimeapi.NewRuntimeServiceClient(conn)
	images := runtimeapi.NewImageServiceClient(conn)
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
	// And the caller got a copy: changing the reply changes nothing on the server.
	list.Items[0].Metadata.Name = "mine"
	again, err := runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || again.Items[0].Metadata.Name != "p" || again.Items[0].Id != run.PodSandboxId {
		t.Fatalf("ListPodSandbox after changing a reply = %v, %v; want sandbox %s named p", again, err, run.PodSandboxId)
	}

	_, err = runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus of an unknown container: %v; want NotFound", err)
	}
	_, err = runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetContainerEvents (a stream): %v; want Unimplemented", err)
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
