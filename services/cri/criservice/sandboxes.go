package criservice

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type sandbox struct {
	id        string
	config    *runtimeapi.PodSandboxConfig
	handler   string
	state     runtimeapi.PodSandboxState
	createdAt int64 // Unix nanoseconds
	ip        string
}

func (sb *sandbox) proto() *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             sb.id,
		Metadata:       sb.config.GetMetadata(),
		State:          sb.state,
		CreatedAt:      sb.createdAt,
		Labels:         sb.config.GetLabels(),
		Annotations:    sb.config.GetAnnotations(),
		RuntimeHandler: sb.handler,
	}
}

// sameName reports whether two sandboxes would have the same containerd
// sandbox name (name_namespace_uid_attempt), which containerd reserves.
func sameName(a, b *runtimeapi.PodSandboxMetadata) bool {
	return a.GetName() == b.GetName() && a.GetNamespace() == b.GetNamespace() &&
		a.GetUid() == b.GetUid() && a.GetAttempt() == b.GetAttempt()
}

// newID returns a random 64-hex-digit ID, the shape of containerd's IDs.
func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RunPodSandbox creates a READY sandbox with a new 64-hex-digit ID, creates its
// LogDirectory, and asks the driver for its pod IP. It runs with the default
// runtime handler "" or the one named after the runtime (Handlers), which are the
// same. Errors: InvalidArgument without metadata or for any other runtime handler
// (a RuntimeClass whose handler this runtime does not have), in containerd's words;
// AlreadyExists when a sandbox with the same name, namespace, uid and attempt
// exists (containerd reserves that name).
func (s *Service) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	if cfg.GetMetadata() == nil {
		return nil, status.Error(codes.InvalidArgument, "sandbox config must include metadata")
	}
	handler := req.GetRuntimeHandler()
	if !slices.Contains(s.Handlers(), handler) {
		return nil, status.Errorf(codes.InvalidArgument, "failed to get sandbox runtime: no runtime for %q is configured (%s serves the handlers %q)",
			handler, s.name, s.Handlers())
	}
	if dir := cfg.GetLogDirectory(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "create sandbox log directory: %v", err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "runtime is shut down")
	}
	for _, other := range s.sandboxes {
		if sameName(other.config.GetMetadata(), cfg.GetMetadata()) {
			m := cfg.GetMetadata()
			return nil, status.Errorf(codes.AlreadyExists, "sandbox name %s_%s_%s_%d is reserved for sandbox %s",
				m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt(), other.id)
		}
	}
	sb := &sandbox{
		id:        newID(),
		handler:   handler,
		config:    cfg,
		state:     runtimeapi.PodSandboxState_SANDBOX_READY,
		createdAt: time.Now().UnixNano(),
	}
	ip, err := s.driver.RunSandbox(sb.id, cfg)
	if err != nil {
		return nil, asStatus(err, codes.Internal, "run sandbox")
	}
	sb.ip = ip
	s.sandboxes[sb.id] = sb
	s.sandboxesByPod.add(cfg.GetLabels(), sb.id)
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, sb.id, sb)
	s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, sb.id, sb)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.id}, nil
}

// StopPodSandbox marks the sandbox NOTREADY, forcibly stops its containers
// (SIGKILL, as CRI requires and containerd does: the kubelet has already
// stopped them gracefully with StopContainer) and reclaims its network
// resources. Repeating it is not an error; an unknown ID is NotFound, as in
// containerd (the kubelet ignores NotFound here).
func (s *Service) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	id := req.GetPodSandboxId()
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	if !ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", id)
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		sb.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, sb.id, sb)
	}
	ids := s.containerIDsLocked(id)
	s.mu.Unlock()

	for _, cid := range ids {
		if err := s.stopContainer(ctx, cid, 0); err != nil && status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
	s.driver.StopSandbox(id)
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox forcibly stops and removes the sandbox's containers, then
// the sandbox. Removing an unknown sandbox is not an error, as CRI requires.
func (s *Service) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	id := req.GetPodSandboxId()
	for {
		s.mu.Lock()
		sb, ok := s.sandboxes[id]
		if !ok {
			s.mu.Unlock()
			return &runtimeapi.RemovePodSandboxResponse{}, nil
		}
		// NOTREADY refuses new containers and starts, so this loop ends.
		if sb.state != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			sb.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, sb.id, sb)
		}
		var live []string
		for _, cid := range s.containerIDsLocked(id) {
			if c := s.containers[cid]; c.starting || c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
				live = append(live, cid)
			}
		}
		if len(live) == 0 {
			for _, cid := range s.containerIDsLocked(id) {
				s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, s.containers[cid])
				s.forgetContainerLocked(s.containers[cid])
			}
			s.emitLocked(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, id, sb)
			delete(s.sandboxes, id)
			s.sandboxesByPod.remove(sb.config.GetLabels(), id)
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		for _, cid := range live {
			if err := s.stopContainer(ctx, cid, 0); err != nil && status.Code(err) != codes.NotFound {
				return nil, err
			}
		}
	}
	s.driver.StopSandbox(id)
	if err := s.driver.RemoveSandbox(id); err != nil {
		return nil, asStatus(err, codes.Internal, "remove sandbox")
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus returns the sandbox's state, creation time (Unix
// nanoseconds), pod IP and the namespace options it was run with — echoed as
// containerd does, since the kubelet recreates a sandbox whose network
// namespace mode differs from the pod's. An unknown ID is NotFound.
func (s *Service) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: sb.status()}, nil
}

// status is the sandbox's CRI status.
func (sb *sandbox) status() *runtimeapi.PodSandboxStatus {
	nsOpts := sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if nsOpts == nil {
		nsOpts = &runtimeapi.NamespaceOption{}
	}
	return &runtimeapi.PodSandboxStatus{
		Id:             sb.id,
		Metadata:       sb.config.GetMetadata(),
		State:          sb.state,
		CreatedAt:      sb.createdAt,
		Network:        &runtimeapi.PodSandboxNetworkStatus{Ip: sb.ip},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: nsOpts}},
		Labels:         sb.config.GetLabels(),
		Annotations:    sb.config.GetAnnotations(),
		RuntimeHandler: sb.handler,
	}
}

// ListPodSandbox lists sandboxes, oldest first, matching every set field of
// the filter: exact ID, state, and all label-selector pairs.
func (s *Service) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, sb := range candidates(s.sandboxes, s.sandboxesByPod, f.GetLabelSelector()) {
		switch {
		case f.GetId() != "" && f.GetId() != sb.id,
			f.GetState() != nil && f.GetState().GetState() != sb.state,
			!matchLabels(sb.config.GetLabels(), f.GetLabelSelector()):
			continue
		}
		out = append(out, sb.proto())
	}
	slices.SortFunc(out, func(a, b *runtimeapi.PodSandbox) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.Id, b.Id))
	})
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

// asStatus keeps a gRPC status error as it is and wraps any other error in
// code, prefixed with what failed.
func asStatus(err error, code codes.Code, what string) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(code, fmt.Sprintf("%s: %v", what, err))
}

// currentState returns the sandbox's state; a nil sandbox is NOTREADY.
func (sb *sandbox) currentState() runtimeapi.PodSandboxState {
	if sb == nil {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return sb.state
}
