package criservice

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
)

// Exit code and reason of a container whose start failed, as containerd sets them.
const (
	startErrorExitCode = 128
	startErrorReason   = "StartError"
)

type container struct {
	spec      ContainerSpec
	image     *image // as it was when the container was created
	logPath   string
	resources *runtimeapi.ContainerResources

	state      runtimeapi.ContainerState
	createdAt  int64 // Unix nanoseconds, like the next two
	startedAt  int64
	finishedAt int64
	exitCode   int32
	reason     string
	message    string

	// While StartContainer runs: starting is set, cancelStart abandons the
	// start and startDone is closed when it has returned.
	starting    bool
	cancelStart context.CancelFunc
	startDone   chan struct{}
	// exitReported is set when the driver reported the exit, possibly before
	// StartContainer got the lock back.
	exitReported bool
	log          *criolog.File
}

// startSpec is the spec a start runs: the created one, with the resources
// UpdateContainerResources recorded since, if any.
func (c *container) startSpec() *ContainerSpec {
	if c.resources == nil || c.resources.GetLinux() == c.spec.Config.GetLinux().GetResources() {
		return &c.spec
	}
	spec := c.spec
	cfg := proto.CloneOf(spec.Config)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	cfg.Linux.Resources = c.resources.GetLinux()
	spec.Config = cfg
	return &spec
}

func (c *container) proto() *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           c.spec.ID,
		PodSandboxId: c.spec.SandboxID,
		Metadata:     c.spec.Config.GetMetadata(),
		Image:        c.imageSpec(),
		ImageRef:     c.image.ref(),
		ImageId:      c.image.id,
		State:        c.state,
		CreatedAt:    c.createdAt,
		Labels:       c.spec.Config.GetLabels(),
		Annotations:  c.spec.Config.GetAnnotations(),
	}
}

func (c *container) imageSpec() *runtimeapi.ImageSpec {
	requested := c.spec.Config.GetImage()
	return &runtimeapi.ImageSpec{
		Image:              c.image.name,
		Annotations:        requested.GetAnnotations(),
		UserSpecifiedImage: requested.GetUserSpecifiedImage(),
		RuntimeHandler:     requested.GetRuntimeHandler(),
	}
}

func (c *container) status() *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id:          c.spec.ID,
		Metadata:    c.spec.Config.GetMetadata(),
		State:       c.state,
		CreatedAt:   c.createdAt,
		StartedAt:   c.startedAt,
		FinishedAt:  c.finishedAt,
		ExitCode:    c.exitCode,
		Image:       c.imageSpec(),
		ImageRef:    c.image.ref(),
		ImageId:     c.image.id,
		Reason:      c.reason,
		Message:     c.message,
		Labels:      c.spec.Config.GetLabels(),
		Annotations: c.spec.Config.GetAnnotations(),
		Mounts:      c.spec.Config.GetMounts(),
		LogPath:     c.logPath,
		Resources:   c.resources,
		StopSignal:  c.spec.Config.GetStopSignal(),
	}
}

func (s *Service) containerIDsLocked(sandboxID string) []string {
	var ids []string
	for id, c := range s.containers {
		if c.spec.SandboxID == sandboxID {
			ids = append(ids, id)
		}
	}
	return ids
}

// forgetContainerLocked removes c from the containers and their index.
func (s *Service) forgetContainerLocked(c *container) {
	delete(s.containers, c.spec.ID)
	s.containersByPod.remove(c.spec.Config.GetLabels(), c.spec.ID)
}

// CreateContainer creates a container in state CREATED in a READY sandbox. Its
// log path is the sandbox's LogDirectory joined with the config's LogPath (none
// if either is empty, as in containerd). Errors: InvalidArgument without
// metadata or when the driver refuses the config; NotFound for an unknown
// sandbox or an image that was not pulled; FailedPrecondition for a sandbox
// that is not READY; AlreadyExists when the sandbox has a container of that
// name and attempt.
func (s *Service) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	if cfg.GetMetadata() == nil {
		return nil, status.Error(codes.InvalidArgument, "container config must include metadata")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready", sb.id)
	}
	im := s.findImageLocked(cfg.GetImage().GetImage())
	if im == nil {
		return nil, status.Errorf(codes.NotFound, "image %q not found: pull it first", cfg.GetImage().GetImage())
	}
	for _, id := range s.containerIDsLocked(sb.id) {
		m := s.containers[id].spec.Config.GetMetadata()
		if m.GetName() == cfg.GetMetadata().GetName() && m.GetAttempt() == cfg.GetMetadata().GetAttempt() {
			return nil, status.Errorf(codes.AlreadyExists, "container name %q attempt %d is reserved for container %s in sandbox %s",
				m.GetName(), m.GetAttempt(), id, sb.id)
		}
	}
	if err := s.driver.ValidateContainer(sb.config, cfg); err != nil {
		return nil, asStatus(err, codes.InvalidArgument, "create container")
	}
	c := &container{
		spec: ContainerSpec{
			ID:        newID(),
			SandboxID: sb.id,
			Sandbox:   sb.config,
			Config:    cfg,
			Image:     im.name,
		},
		image:     im,
		state:     runtimeapi.ContainerState_CONTAINER_CREATED,
		createdAt: time.Now().UnixNano(),
	}
	if dir, p := sb.config.GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		c.logPath = filepath.Join(dir, p)
	}
	if r := cfg.GetLinux().GetResources(); r != nil {
		c.resources = &runtimeapi.ContainerResources{Linux: r}
	}
	s.containers[c.spec.ID] = c
	s.containersByPod.add(cfg.GetLabels(), c.spec.ID)
	s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, c)
	return &runtimeapi.CreateContainerResponse{ContainerId: c.spec.ID}, nil
}

// StartContainer starts a CREATED container and returns once it runs. If the
// start fails the container is EXITED with exit code 128 and reason
// "StartError" and the error's message, as containerd records it. Errors:
// NotFound; FailedPrecondition when the container is not CREATED or its
// sandbox is not READY; the driver's error otherwise.
func (s *Service) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	id := req.GetContainerId()
	s.mu.Lock()
	c, ok := s.containers[id]
	switch {
	case !ok:
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "container %q not found", id)
	case s.closed:
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "runtime is shut down")
	case c.starting || c.state != runtimeapi.ContainerState_CONTAINER_CREATED:
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is in %s state, not CONTAINER_CREATED", id, c.state)
	case s.sandboxes[c.spec.SandboxID].currentState() != runtimeapi.PodSandboxState_SANDBOX_READY:
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready", c.spec.SandboxID)
	}
	startCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.starting, c.cancelStart, c.startDone = true, cancel, make(chan struct{})
	var err error
	if c.logPath != "" {
		c.log, err = criolog.Open(c.logPath)
	}
	log := c.log
	spec := c.startSpec()
	s.mu.Unlock()

	var startedAt time.Time
	if err == nil {
		startedAt, err = s.driver.StartContainer(startCtx, spec, log, func(st ExitStatus) { s.containerExited(c, st) })
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c.starting, c.cancelStart = false, nil
	close(c.startDone)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = status.FromContextError(err).Err()
		}
		err = asStatus(err, codes.Unknown, "start container")
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		c.finishedAt = time.Now().UnixNano()
		c.exitCode = startErrorExitCode
		c.reason = startErrorReason
		c.message = status.Convert(err).Message()
		c.log = nil
		_ = log.Close()
		s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c)
		return nil, err
	}
	c.startedAt = startedAt.UnixNano()
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, c)
	if c.exitReported {
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

// containerExited records a driver's exit report: EXITED, reason "Completed"
// for exit code 0 and "Error" otherwise, as the kubelet shows them.
func (s *Service) containerExited(c *container, st ExitStatus) {
	s.mu.Lock()
	c.exitReported = true
	c.exitCode = st.ExitCode
	c.finishedAt = st.FinishedAt.UnixNano()
	c.reason = "Completed"
	if st.ExitCode != 0 {
		c.reason = "Error"
	}
	if st.Reason != "" {
		c.reason = st.Reason
	}
	c.message = st.Message
	if !c.starting {
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c)
	}
	log := c.log
	c.log = nil
	s.mu.Unlock()
	_ = log.Close()
}

// StopContainer stops a RUNNING container: its stop signal (config StopSignal,
// default SIGTERM), then SIGKILL after Timeout seconds (0: SIGKILL at once),
// and returns once it has exited. A container that is not running is left as
// it is and the call succeeds, as in containerd; one still starting has its
// start abandoned. An unknown ID is NotFound.
func (s *Service) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := s.stopContainer(ctx, req.GetContainerId(), time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (s *Service) stopContainer(ctx context.Context, id string, timeout time.Duration) error {
	for {
		s.mu.Lock()
		c, ok := s.containers[id]
		if !ok {
			s.mu.Unlock()
			return status.Errorf(codes.NotFound, "container %q not found", id)
		}
		if c.starting {
			c.cancelStart()
			done := c.startDone
			s.mu.Unlock()
			select {
			case <-done:
				continue // the start ended; stop what it started, if anything
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		running := c.state == runtimeapi.ContainerState_CONTAINER_RUNNING
		s.mu.Unlock()
		if !running {
			return nil
		}
		if err := s.driver.StopContainer(ctx, id, timeout); err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return asStatus(err, codes.Unknown, "stop container")
		}
		return nil
	}
}

// RemoveContainer forcibly stops the container if it runs and forgets it.
// Removing an unknown container is not an error, as CRI requires. The log file
// stays: the kubelet deletes container logs itself, as with containerd.
func (s *Service) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	id := req.GetContainerId()
	for {
		s.mu.Lock()
		c, ok := s.containers[id]
		if !ok {
			s.mu.Unlock()
			return &runtimeapi.RemoveContainerResponse{}, nil
		}
		if !c.starting && c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
			s.emitContainerLocked(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, c)
			s.forgetContainerLocked(c)
			s.mu.Unlock()
			return &runtimeapi.RemoveContainerResponse{}, nil
		}
		s.mu.Unlock()
		if err := s.stopContainer(ctx, id, 0); err != nil && status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
}

// ContainerStatus returns the container's state, times (Unix nanoseconds),
// exit code, reason, image and log path. An unknown ID is NotFound.
func (s *Service) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: c.status()}, nil
}

// ListContainers lists containers, oldest first, matching every set field of
// the filter: exact ID, pod sandbox ID, state, and all label-selector pairs.
func (s *Service) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range candidates(s.containers, s.containersByPod, f.GetLabelSelector()) {
		switch {
		case f.GetId() != "" && f.GetId() != c.spec.ID,
			f.GetPodSandboxId() != "" && f.GetPodSandboxId() != c.spec.SandboxID,
			f.GetState() != nil && f.GetState().GetState() != c.state,
			!matchLabels(c.spec.Config.GetLabels(), f.GetLabelSelector()):
			continue
		}
		out = append(out, c.proto())
	}
	slices.SortFunc(out, func(a, b *runtimeapi.Container) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.Id, b.Id))
	})
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

// UpdateContainerResources records the new Linux resources, which
// ContainerStatus then reports and a later start applies, and has a driver
// that is a ResourceUpdater apply them to the running container first.
// Errors: NotFound for an unknown ID; the driver's.
func (s *Service) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	if req.GetLinux() == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	if u, ok := s.driver.(ResourceUpdater); ok {
		if err := u.UpdateContainerResources(c.spec.ID, req.GetLinux()); err != nil {
			return nil, asStatus(err, codes.Unknown, "update container resources")
		}
	}
	c.resources = &runtimeapi.ContainerResources{Linux: req.GetLinux()}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// ReopenContainerLog reopens a running container's log file at its path, so
// output after the kubelet rotated (renamed) the file goes to a fresh one.
// Errors: NotFound; FailedPrecondition when the container is not running.
func (s *Service) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING || c.log == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", c.spec.ID)
	}
	if err := c.log.Reopen(); err != nil {
		return nil, status.Errorf(codes.Internal, "reopen container log: %v", err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ExecSync runs a command in a RUNNING container through the driver's Execer
// and returns stdout, stderr and the exit code. Errors: Unimplemented when the
// driver cannot exec; NotFound; FailedPrecondition when the container is not
// running; InvalidArgument for an empty command; DeadlineExceeded when Timeout
// (seconds, 0: none) passes.
func (s *Service) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	execer, ok := s.driver.(Execer)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "%s cannot run commands in containers", s.name)
	}
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec needs a command")
	}
	s.mu.Lock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is in %s state, not CONTAINER_RUNNING", c.spec.ID, c.state)
	}
	spec := &c.spec
	s.mu.Unlock()
	resp, err := execer.ExecSync(ctx, spec, req.GetCmd(), time.Duration(req.GetTimeout())*time.Second)
	if err != nil {
		return nil, asStatus(err, codes.Unknown, "exec")
	}
	return resp, nil
}

// ContainerStats returns the container's attributes and, from a driver that
// is a StatsProvider, its CPU and memory usage (none for a container that
// does not run). An unknown ID is NotFound.
func (s *Service) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	s.mu.Lock()
	c, ok := s.containers[req.GetContainerId()]
	if !ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	stats := c.statsLocked()
	s.mu.Unlock()
	if err := s.fillUsage(stats); err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: stats}, nil
}

// ListContainerStats returns ContainerStats of the containers matching every
// set field of the filter (ID, pod sandbox ID, labels), oldest first.
func (s *Service) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	s.mu.Lock()
	var list []*container
	for _, c := range candidates(s.containers, s.containersByPod, f.GetLabelSelector()) {
		switch {
		case f.GetId() != "" && f.GetId() != c.spec.ID,
			f.GetPodSandboxId() != "" && f.GetPodSandboxId() != c.spec.SandboxID,
			!matchLabels(c.spec.Config.GetLabels(), f.GetLabelSelector()):
			continue
		}
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b *container) int {
		return cmp.Or(cmp.Compare(a.createdAt, b.createdAt), cmp.Compare(a.spec.ID, b.spec.ID))
	})
	out := make([]*runtimeapi.ContainerStats, 0, len(list))
	for _, c := range list {
		out = append(out, c.statsLocked())
	}
	s.mu.Unlock()
	for _, st := range out {
		if err := s.fillUsage(st); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

func (c *container) statsLocked() *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id:          c.spec.ID,
		Metadata:    c.spec.Config.GetMetadata(),
		Labels:      c.spec.Config.GetLabels(),
		Annotations: c.spec.Config.GetAnnotations(),
	}}
}

// fillUsage asks a StatsProvider driver for the container's usage.
func (s *Service) fillUsage(st *runtimeapi.ContainerStats) error {
	p, ok := s.driver.(StatsProvider)
	if !ok {
		return nil
	}
	cpu, mem, err := p.ContainerUsage(st.Attributes.Id)
	if err != nil {
		return asStatus(err, codes.Internal, "container stats")
	}
	st.Cpu, st.Memory = cpu, mem
	return nil
}
