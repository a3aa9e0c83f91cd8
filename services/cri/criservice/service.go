// Package criservice is the CRI bookkeeping shared by skiff's built-in
// runtimes: images, pod sandboxes, containers, their states, filters and
// status messages, with the semantics of containerd's CRI plugin. What differs
// between runtimes — how a container actually runs — is a Driver, much as
// Kubernetes' generic registry Store delegates to a per-resource strategy.
//
// A Service implements runtimeapi.RuntimeServiceServer and
// runtimeapi.ImageServiceServer; serve it with skiff.dev/services/runtime.Serve.
package criservice

import (
	"context"
	"iter"
	"maps"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/streaming"
)

// RuntimeVersion is the version every built-in runtime reports.
const RuntimeVersion = "0.1.0"

// Driver makes a Service's containers run. The Service owns all CRI state and
// calls the Driver only for the side effects; it never holds its lock while a
// Driver method may block, except RunSandbox and ValidateContainer, which
// must be quick.
type Driver interface {
	// RunSandbox prepares what sandbox id needs and returns its pod IP ("" for
	// none, as a host-network sandbox in containerd has none). A gRPC status
	// error keeps its code.
	RunSandbox(id string, config *runtimeapi.PodSandboxConfig) (ip string, err error)
	// StopSandbox reclaims the sandbox's network resources. It is called after
	// the sandbox's containers have stopped, possibly more than once.
	StopSandbox(id string)
	// RemoveSandbox frees everything RunSandbox made. It is idempotent.
	RemoveSandbox(id string) error
	// ValidateContainer refuses, with a gRPC status error (normally
	// InvalidArgument), a container the driver cannot run; CreateContainer
	// returns that error, which the kubelet reports as CreateContainerError.
	ValidateContainer(sandbox *runtimeapi.PodSandboxConfig, config *runtimeapi.ContainerConfig) error
	// StartContainer makes the container run and returns when it runs, with
	// the time it started. Its output goes to log (nil: discard). After a
	// successful start the driver calls exited exactly once, when the
	// container has stopped and all its output is in log. ctx is cancelled
	// when the start is abandoned (the request ends, or the container is
	// stopped or removed while starting).
	StartContainer(ctx context.Context, c *ContainerSpec, log *criolog.File, exited func(ExitStatus)) (startedAt time.Time, err error)
	// StopContainer stops a running container: the stop signal, then SIGKILL
	// after timeout (0: at once). It returns once exited has been called, or
	// with ctx's error; for a container that is not running it returns nil.
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	// Close ends every container at once and waits for the driver's
	// goroutines; starts after Close fail.
	Close()
}

// Execer is implemented by a Driver that can run a command in a running
// container and wait for it (CRI ExecSync); without it ExecSync answers
// codes.Unimplemented.
type Execer interface {
	// ExecSync runs cmd in container c, killing it after timeout (0: none),
	// and returns its output and exit code. A timeout is a
	// codes.DeadlineExceeded error, as containerd returns it.
	ExecSync(ctx context.Context, c *ContainerSpec, cmd []string, timeout time.Duration) (*runtimeapi.ExecSyncResponse, error)
}

// StatsProvider is implemented by a Driver that measures its containers
// (CRI ContainerStats, ListContainerStats); without it stats carry only
// the containers' attributes.
type StatsProvider interface {
	// ContainerUsage returns the CPU and memory usage of container id, both
	// nil when it is not running or not measured.
	ContainerUsage(id string) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, error)
}

// ContainerSpec is what a Driver needs to know about a container. It is
// immutable once created; drivers must not modify it.
type ContainerSpec struct {
	// ID is the container's ID (64 hex digits).
	ID string
	// SandboxID is the ID of the pod sandbox the container belongs to.
	SandboxID string
	// Sandbox is the config the sandbox was run with (pod annotations, hostname).
	Sandbox *runtimeapi.PodSandboxConfig
	// Config is the config the container was created with.
	Config *runtimeapi.ContainerConfig
	// Image is the normalized name of the container's image
	// ("docker.io/library/busybox:latest").
	Image string
}

// ExitStatus is how a container ended.
type ExitStatus struct {
	// ExitCode is the process's exit code, or 128+signal when a signal killed
	// it (137 for SIGKILL, 143 for SIGTERM), as runc reports it.
	ExitCode int32
	// FinishedAt is when the container stopped.
	FinishedAt time.Time
	// Reason, when set, replaces the status reason derived from the exit
	// code ("Completed", "Error"), e.g. "OOMKilled".
	Reason string
	// Message is the status message, e.g. what went wrong cleaning up.
	Message string
}

// ResourceUpdater is implemented by a Driver that enforces container
// resources (CRI UpdateContainerResources); without it the new resources
// are only recorded, which a driver that enforces none may do.
type ResourceUpdater interface {
	// UpdateContainerResources applies r to container id if it runs (a
	// container not yet started gets them at its start). A gRPC status
	// error keeps its code.
	UpdateContainerResources(id string, r *runtimeapi.LinuxContainerResources) error
}

// Option configures a Service.
type Option func(*Service)

// WithFilesystem makes ImageFsInfo report the usage of the filesystem that
// holds dir; without it ImageFsInfo reports zeros.
func WithFilesystem(dir string) Option {
	return func(s *Service) { s.fsDir = dir }
}

// Service is an in-memory CRI runtime and image service over a Driver. All
// state is guarded by one mutex; several Services may live in one process.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	name   string
	driver Driver
	fsDir  string

	closeOnce sync.Once

	mu         sync.Mutex
	closed     bool
	images     map[string]*image     // by image ID
	sandboxes  map[string]*sandbox   // by sandbox ID
	containers map[string]*container // by container ID
	streaming  *streaming.Server     // nil until StartStreaming

	// sandboxesByPod and containersByPod index the IDs above by podUIDLabel.
	sandboxesByPod, containersByPod byPodUID

	// subscribers are the GetContainerEvents streams; done is closed by Close,
	// which ends them.
	subscribers map[*eventSubscriber]struct{}
	done        chan struct{}
}

// New returns a Service that reports runtimeName in Version and runs
// containers through d.
func New(runtimeName string, d Driver, opts ...Option) *Service {
	s := &Service{
		name:       runtimeName,
		driver:     d,
		images:     map[string]*image{},
		sandboxes:  map[string]*sandbox{},
		containers: map[string]*container{},

		sandboxesByPod:  byPodUID{},
		containersByPod: byPodUID{},

		subscribers: map[*eventSubscriber]struct{}{},
		done:        make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Close stops the streaming server (ending every exec, attach and port-forward
// stream), abandons starts in progress and closes the driver, which ends every
// container; afterwards all containers are EXITED and no more can start, and the
// GetContainerEvents streams have ended.
// Close is idempotent.
func (s *Service) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		srv := s.streaming
		s.mu.Unlock()
		if srv != nil {
			// Streams first: their commands are killed, so the driver's
			// Close below finds only containers.
			_ = srv.Close()
		}
		s.mu.Lock()
		s.closed = true
		for _, c := range s.containers {
			if c.cancelStart != nil {
				c.cancelStart()
			}
		}
		s.mu.Unlock()
		s.driver.Close()
		close(s.done)
	})
}

// Version reports the runtime's name, RuntimeVersion and CRI API version "v1";
// Version is the kubelet-facing API version "0.1.0", as containerd reports.
func (s *Service) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       s.name,
		RuntimeVersion:    RuntimeVersion,
		RuntimeApiVersion: "v1",
	}, nil
}

// Handlers are the runtime handlers a sandbox may ask for: the default "" and the
// runtime's name (e.g. "skiff-sim"), both the same runtime. A RuntimeClass naming the
// latter runs its pods here; one naming anything else fails their sandboxes, as a
// handler containerd has no runtime for does.
func (s *Service) Handlers() []string { return []string{"", s.name} }

// Status reports the RuntimeReady condition, true, and NetworkReady, true unless the
// driver is a NetworkConditioner that says otherwise, and the runtime handlers
// (Handlers).
func (s *Service) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	network := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if c, ok := s.driver.(NetworkConditioner); ok {
		network = c.NetworkCondition()
	}
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			network,
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{
			{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}},
			{Name: s.name, Features: &runtimeapi.RuntimeHandlerFeatures{}},
		},
	}, nil
}

// NetworkConditioner is implemented by a Driver whose pod network may not be ready: the
// sim runtime's until it has been handed a pod CIDR, as kubenet's, or a CNI network's
// whose host-local range is the node's. Status reports its condition as NetworkReady.
type NetworkConditioner interface {
	// NetworkCondition returns the NetworkReady condition (Type runtimeapi.NetworkReady).
	NetworkCondition() *runtimeapi.RuntimeCondition
}

// PodCIDRSetter is implemented by a Driver that allocates pod IPs from the
// node's pod CIDR (the sim runtime).
type PodCIDRSetter interface {
	// SetPodCIDR takes the node's pod CIDR(s), comma-separated as in
	// network_config.pod_cidr. Errors: a range the driver cannot use.
	SetPodCIDR(cidr string) error
}

// UpdateRuntimeConfig hands the pod CIDR to a driver that is a
// PodCIDRSetter (InvalidArgument if it refuses it); other drivers have no
// pod network to configure and ignore it.
func (s *Service) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if setter, ok := s.driver.(PodCIDRSetter); ok && cidr != "" {
		if err := setter.SetPodCIDR(cidr); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// ImageFsInfo reports the usage of the filesystem given WithFilesystem (bytes
// and inodes used, timestamp in Unix nanoseconds) as both the image and the
// container filesystem, or zeros without one.
func (s *Service) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.fsDir},
		UsedBytes:  &runtimeapi.UInt64Value{},
		InodesUsed: &runtimeapi.UInt64Value{},
	}
	if s.fsDir != "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs(s.fsDir, &st); err != nil {
			return nil, status.Errorf(codes.Internal, "statfs %s: %v", s.fsDir, err)
		}
		usage.UsedBytes.Value = (st.Blocks - st.Bfree) * uint64(st.Bsize)
		usage.InodesUsed.Value = st.Files - st.Ffree
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{usage},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{usage},
	}, nil
}

// podUIDLabel is the label a kubelet puts on each sandbox and container with its pod's
// UID, and the one its ListPodSandbox and ListContainers filters name: for each pod's
// status it lists that pod's own. The lists read only the named pod's objects through an
// index, where a scan of every object on the node (which containerd does) cost the
// hollow nodes several per cent of their CPU.
const podUIDLabel = kubelettypes.KubernetesPodUIDLabel

// byPodUID indexes object IDs by the value of their podUIDLabel.
type byPodUID map[string]map[string]struct{}

func (ix byPodUID) add(labels map[string]string, id string) {
	uid, ok := labels[podUIDLabel]
	if !ok {
		return
	}
	if ix[uid] == nil {
		ix[uid] = map[string]struct{}{}
	}
	ix[uid][id] = struct{}{}
}

func (ix byPodUID) remove(labels map[string]string, id string) {
	uid, ok := labels[podUIDLabel]
	if !ok {
		return
	}
	delete(ix[uid], id)
	if len(ix[uid]) == 0 {
		delete(ix, uid)
	}
}

// candidates yields the objects of all (by ID) that a filter's label selector may
// match: those of the pod it names by podUIDLabel, else every one.
func candidates[T any](all map[string]T, ix byPodUID, selector map[string]string) iter.Seq2[string, T] {
	uid, ok := selector[podUIDLabel]
	if !ok {
		return maps.All(all)
	}
	return func(yield func(string, T) bool) {
		for id := range ix[uid] {
			if v, ok := all[id]; ok && !yield(id, v) {
				return
			}
		}
	}
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
