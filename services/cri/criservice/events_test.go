package criservice_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/sim"
	"skiff.dev/services/cri/socketharness"
)

// subscribe opens a container event stream and waits for its headers, after which
// every change is sent. It returns a function that receives the next event, failing
// the test if none comes within 10 s, and one that receives the stream's end.
func subscribe(t *testing.T, rt runtimeapi.RuntimeServiceClient) (next func() *runtimeapi.ContainerEventResponse, end func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("container events: headers: %v", err)
	}
	type received struct {
		e   *runtimeapi.ContainerEventResponse
		err error
	}
	ch := make(chan received, 1)
	go func() {
		for {
			e, err := stream.Recv()
			select {
			case ch <- received{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	recv := func() received {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("nothing on the container event stream within 10s")
			return received{}
		}
	}
	next = func() *runtimeapi.ContainerEventResponse {
		t.Helper()
		r := recv()
		if r.err != nil {
			t.Fatalf("container events: %v", r.err)
		}
		return r.e
	}
	end = func() error {
		t.Helper()
		for {
			if r := recv(); r.err != nil {
				return r.err
			}
		}
	}
	return next, end
}

// TestContainerEvents follows a sandbox and its container through their lives on the
// event stream, over a real socket: every change is one event, in order, carrying the
// sandbox's and its containers' statuses as they were at the change.
func TestContainerEvents(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	pullBusybox(t, c)
	next, _ := subscribe(t, c.Runtime)
	expect := func(what string, typ runtimeapi.ContainerEventType, id string, check func(*runtimeapi.ContainerEventResponse)) {
		t.Helper()
		e := next()
		if e.ContainerEventType != typ || e.ContainerId != id {
			t.Fatalf("%s: event %s of %.12s; want %s of %.12s", what, e.ContainerEventType, e.ContainerId, typ, id)
		}
		if e.CreatedAt == 0 || e.PodSandboxStatus.GetMetadata().GetUid() != "uid-p" {
			t.Fatalf("%s: event at %d with sandbox %v; want a time and pod uid-p", what, e.CreatedAt, e.PodSandboxStatus.GetMetadata())
		}
		if check != nil {
			check(e)
		}
	}
	containerState := func(want runtimeapi.ContainerState) func(*runtimeapi.ContainerEventResponse) {
		return func(e *runtimeapi.ContainerEventResponse) {
			t.Helper()
			if len(e.ContainersStatuses) != 1 || e.ContainersStatuses[0].State != want {
				t.Fatalf("event %s: container statuses %v; want one %s", e.ContainerEventType, e.ContainersStatuses, want)
			}
		}
	}

	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(e *runtimeapi.ContainerEventResponse) {
		if e.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_READY || len(e.ContainersStatuses) != 0 {
			t.Fatalf("sandbox event: %v with %d containers; want READY with none", e.PodSandboxStatus.State, len(e.ContainersStatuses))
		}
	}
	expect("RunPodSandbox", runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, sb.PodSandboxId, ready)
	expect("RunPodSandbox", runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, sb.PodSandboxId, ready)

	// A container that ends by itself after 50ms: its exit is an event too.
	cfg := containerConfig("c", nil)
	cfg.Annotations = map[string]string{sim.AnnotationRunTime: "50ms"}
	sbCfg := sandboxConfig("p", nil)
	created, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ContainerId
	expect("CreateContainer", runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, id, containerState(runtimeapi.ContainerState_CONTAINER_CREATED))
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	expect("StartContainer", runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, id, containerState(runtimeapi.ContainerState_CONTAINER_RUNNING))
	expect("the run time ended", runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, id, containerState(runtimeapi.ContainerState_CONTAINER_EXITED))

	if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	expect("StopPodSandbox", runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, sb.PodSandboxId, func(e *runtimeapi.ContainerEventResponse) {
		if e.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Fatalf("StopPodSandbox: sandbox %v; want NOTREADY", e.PodSandboxStatus.State)
		}
	})
	// Stopping it again changes nothing, so sends nothing: the next event is the removal.
	if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	expect("RemovePodSandbox", runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, id, nil)
	expect("RemovePodSandbox", runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, sb.PodSandboxId, nil)
}

// TestContainerEventsEndWithTheRuntime: closing the runtime ends the stream with
// Unavailable, after the events of the containers it stopped.
func TestContainerEventsEndWithTheRuntime(t *testing.T) {
	rt := sim.New()
	t.Cleanup(rt.Close)
	c := socketharness.Start(t, rt, rt)
	ctx := context.Background()
	pullBusybox(t, c)
	sb, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p", nil)})
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("c", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		t.Fatal(err)
	}
	next, end := subscribe(t, c.Runtime)
	rt.Close()
	if e := next(); e.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || e.ContainerId != created.ContainerId {
		t.Fatalf("after Close: event %s of %.12s; want the container's STOPPED", e.ContainerEventType, e.ContainerId)
	}
	if err := end(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after Close: %v; want Unavailable", err)
	}
}
