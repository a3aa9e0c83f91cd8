package criservice

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// EventBufferSize is how many container events a GetContainerEvents stream may have
// waiting to be sent. A subscriber that falls this far behind has its stream ended with
// codes.ResourceExhausted instead of losing events silently: it relists and subscribes
// again (the kubelet's Evented PLEG does both), while the runtime itself never waits for
// a slow reader.
const EventBufferSize = 1000

// eventSubscriber is one GetContainerEvents stream.
type eventSubscriber struct {
	events chan *runtimeapi.ContainerEventResponse
	// behind is closed once an event could not be queued.
	behind chan struct{}
	lost   bool
}

// GetContainerEvents streams an event for every change of a sandbox or container from
// the moment it is called until the stream's context ends (codes.Canceled or
// DeadlineExceeded), the runtime shuts down (codes.Unavailable) or the subscriber falls
// EventBufferSize events behind (codes.ResourceExhausted). Each event names the
// container (for sandbox events, the sandbox) and what happened — CONTAINER_CREATED,
// _STARTED, _STOPPED (exited, however) or _DELETED — with the time of the change (Unix
// nanoseconds), the sandbox's status and the statuses of the sandbox's containers as
// they were then, as containerd's CRI plugin sends them (its eventMonitor); a sandbox
// counts as a container, created and started by RunPodSandbox, stopped by
// StopPodSandbox and deleted by RemovePodSandbox. Nothing is replayed: changes before
// the call are for a list to find. This is the stream of KEP-3386, which the kubelet's
// Evented PLEG reads instead of relisting every second.
func (s *Service) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	sub := &eventSubscriber{
		events: make(chan *runtimeapi.ContainerEventResponse, EventBufferSize),
		behind: make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "runtime is shut down")
	}
	s.subscribers[sub] = struct{}{}
	done := s.done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subscribers, sub)
		s.mu.Unlock()
	}()
	// The headers tell the subscriber that every change from now on will be
	// sent: a list it makes after they arrive misses nothing.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	ctx := stream.Context()
	for {
		select {
		case e := <-sub.events:
			if err := stream.Send(e); err != nil {
				return err
			}
		case <-sub.behind:
			return status.Errorf(codes.ResourceExhausted, "container events: the subscriber fell %d events behind; relist and subscribe again", EventBufferSize)
		case <-done:
			return status.Error(codes.Unavailable, "runtime is shut down")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// emitLocked queues an event of type typ about container or sandbox id, of sandbox sb,
// for every subscriber. The event is shared by the subscribers and never changed
// afterwards. Callers hold mu.
func (s *Service) emitLocked(typ runtimeapi.ContainerEventType, id string, sb *sandbox) {
	if len(s.subscribers) == 0 || sb == nil {
		return
	}
	e := &runtimeapi.ContainerEventResponse{
		ContainerId:        id,
		ContainerEventType: typ,
		CreatedAt:          time.Now().UnixNano(),
		PodSandboxStatus:   sb.status(),
	}
	for _, c := range s.containers {
		if c.spec.SandboxID == sb.id {
			e.ContainersStatuses = append(e.ContainersStatuses, c.status())
		}
	}
	for sub := range s.subscribers {
		if sub.lost {
			continue
		}
		select {
		case sub.events <- e:
		default:
			sub.lost = true
			close(sub.behind)
		}
	}
}

// emitContainerLocked emits an event about container c. Callers hold mu.
func (s *Service) emitContainerLocked(typ runtimeapi.ContainerEventType, c *container) {
	s.emitLocked(typ, c.spec.ID, s.sandboxes[c.spec.SandboxID])
}
