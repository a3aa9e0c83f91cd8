package kuberuntime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/lifecycle"
	"skiff.dev/services/kubelet/prober/results"
)

const (
	// defaultRequestTimeout bounds one CRI call, as kubelet's
	// --runtime-request-timeout (2m) does.
	defaultRequestTimeout = 2 * time.Minute
	// minimumGracePeriodInSeconds is the least time a container gets to stop
	// once asked, whatever the pod says (kuberuntime's own floor).
	minimumGracePeriodInSeconds = 2
)

// Options configures a Manager.
type Options struct {
	// PodLogsDirectory is the root of the pod log directories
	// (<root>/<namespace>_<name>_<uid>/<container>/<attempt>.log); required.
	PodLogsDirectory string
	// Logger receives the manager's logs; nil means slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds each CRI call other than image pulls and
	// container stops; 0 means 2 minutes.
	RequestTimeout time.Duration
	// ImagePullBackOff spaces out failed pulls of the same image for the same
	// pod; nil means 10 s doubling to 300 s.
	ImagePullBackOff *flowcontrol.Backoff
	// Recorder reports the pod events kubelet reports from here (Pulling,
	// Pulled, Created, Started, Killing, BackOff, Failed, FailedPostStartHook,
	// FailedPreStopHook); nil records none.
	Recorder record.EventRecorder
	// LivenessManager and StartupManager hold the probes' results: a
	// container that failed either is killed (and restarted per
	// restartPolicy). nil: no container is killed for its probes.
	LivenessManager, StartupManager *results.Manager
	// KubeletVersion, e.g. "v1.32.4", makes httpGet lifecycle hooks'
	// User-Agent "kube-lifecycle/1.32".
	KubeletVersion string
	// PodDNS returns the DNS config of a pod's sandbox (the resolv.conf the
	// runtime writes; kubelet's RuntimeHelper.GetPodDNS); nil gives none,
	// and the runtime's default applies.
	PodDNS func(*v1.Pod) (*runtimeapi.DNSConfig, error)
	// PullSecrets returns the Secrets named by a pod's imagePullSecrets
	// that could be read (kubelet's getPullSecretsForPod: a missing one is
	// skipped); their credentials go to PullImage as CRI AuthConfig. nil:
	// every pull is anonymous.
	PullSecrets func(context.Context, *v1.Pod) []v1.Secret

	// RuntimeClassManager resolves a pod's RuntimeClass to the runtime
	// handler its sandbox runs with; nil runs every sandbox with the
	// runtime's default handler ("").
	RuntimeClassManager RuntimeClassManager

	// RuntimeHelper resolves each container's environment and mounts and
	// each pod's cgroup parent (the kubelet); nil means plain env values
	// only, no volumes and no cgroup parent.
	RuntimeHelper RuntimeHelper
	// MemoryCapacity is the node's memory in bytes, which scales a
	// Burstable container's oom_score_adj; 0 gives Burstable containers 999.
	MemoryCapacity int64
}

// RuntimeHelper is what the kubelet resolves for the runtime manager.
// Mirrors kubecontainer.RuntimeHelper.
type RuntimeHelper interface {
	// GenerateRunContainerOptions returns c's environment and mounts; an
	// error (a missing ConfigMap key, a volume not mounted) is a
	// CreateContainerConfigError with the error's text as message.
	GenerateRunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*container.RunContainerOptions, error)
	// GetPodCgroupParent returns the cgroup the pod's sandbox and containers
	// go under (the sandbox's linux.cgroup_parent).
	GetPodCgroupParent(pod *v1.Pod) string
}

// RuntimeClassManager resolves RuntimeClasses (kubelet's runtimeclass.Manager).
type RuntimeClassManager interface {
	// LookupRuntimeHandler returns the runtime handler of the RuntimeClass
	// runtimeClassName names, "" for none.
	LookupRuntimeHandler(ctx context.Context, runtimeClassName *string) (string, error)
}

// Manager is the kubelet's CRI client: it reads runtime state (GetPods,
// GetPodStatus) and drives a pod towards its spec (SyncPod, KillPod). It keeps
// no pod state of its own beyond the runtime's name and the image-pull
// backoff, so one Manager per kubelet is enough and several kubelets in a
// process do not share anything. Mirrors kuberuntime's
// kubeGenericRuntimeManager.
type Manager struct {
	runtimeService   runtimeapi.RuntimeServiceClient
	imageService     runtimeapi.ImageServiceClient
	podLogsDirectory string
	requestTimeout   time.Duration
	logger           *slog.Logger
	imagePuller      *imageManager
	recorder         record.EventRecorder
	livenessManager  *results.Manager
	startupManager   *results.Manager
	// runner runs the containers' postStart and preStop hooks.
	runner              *lifecycle.HandlerRunner
	podDNS              func(*v1.Pod) (*runtimeapi.DNSConfig, error)
	pullSecrets         func(context.Context, *v1.Pod) []v1.Secret
	runtimeHelper       RuntimeHelper
	runtimeClassManager RuntimeClassManager
	memoryCapacity      int64

	mu             sync.Mutex
	runtimeName    string
	runtimeVersion string
}

// NewManager returns a Manager speaking CRI over conn (see Dial).
func NewManager(conn grpc.ClientConnInterface, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = defaultRequestTimeout
	}
	if opts.ImagePullBackOff == nil {
		opts.ImagePullBackOff = flowcontrol.NewBackOff(10*time.Second, 300*time.Second)
	}
	m := &Manager{
		runtimeService:   runtimeapi.NewRuntimeServiceClient(conn),
		imageService:     runtimeapi.NewImageServiceClient(conn),
		podLogsDirectory: opts.PodLogsDirectory,
		requestTimeout:   opts.RequestTimeout,
		logger:           opts.Logger,
		recorder:         opts.Recorder,
		livenessManager:  opts.LivenessManager,
		startupManager:   opts.StartupManager,
		podDNS:           opts.PodDNS,
		pullSecrets:      opts.PullSecrets,

		runtimeHelper:       opts.RuntimeHelper,
		runtimeClassManager: opts.RuntimeClassManager,
		memoryCapacity:      opts.MemoryCapacity,
	}
	if m.runtimeHelper == nil {
		m.runtimeHelper = plainRuntimeHelper{}
	}
	if m.recorder == nil {
		m.recorder = eventrecorder.Nop{}
	}
	m.imagePuller = &imageManager{m: m, backOff: opts.ImagePullBackOff}
	m.runner = lifecycle.NewHandlerRunner(m, m, opts.KubeletVersion)
	return m
}

// callCtx bounds one CRI call by the request timeout.
func (m *Manager) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.requestTimeout)
}

// Version calls CRI Version and remembers the runtime's name, which
// qualifies every container id ("<name>://<id>").
func (m *Manager) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.runtimeService.Version(cctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		return nil, fmt.Errorf("CRI Version: %w", err)
	}
	m.mu.Lock()
	m.runtimeName, m.runtimeVersion = resp.GetRuntimeName(), resp.GetRuntimeVersion()
	m.mu.Unlock()
	return resp, nil
}

// Type returns the runtime's name ("containerd", "sim", ...), or "" before
// the first successful Version.
func (m *Manager) Type() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runtimeName
}

// runtimeNameOrFetch returns the runtime name, asking the runtime once if it
// is not known yet.
func (m *Manager) runtimeNameOrFetch(ctx context.Context) (string, error) {
	if name := m.Type(); name != "" {
		return name, nil
	}
	resp, err := m.Version(ctx)
	if err != nil {
		return "", err
	}
	return resp.GetRuntimeName(), nil
}

// Status calls CRI Status and returns the runtime's conditions
// (RuntimeReady, NetworkReady).
func (m *Manager) Status(ctx context.Context) (*runtimeapi.RuntimeStatus, error) {
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.runtimeService.Status(cctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI Status: %w", err)
	}
	if resp.GetStatus() == nil {
		return nil, errors.New("CRI Status: runtime returned no status")
	}
	return resp.GetStatus(), nil
}

// UpdatePodCIDR hands the node's pod CIDR(s) (comma-separated, as kubelet
// joins spec.podCIDRs) to the runtime with CRI UpdateRuntimeConfig, from
// which it sets up pod networking: containerd writes its CNI config from its
// conf_template, the sim runtime allocates its pod IPs there. Mirrors
// kubeGenericRuntimeManager.UpdatePodCIDR.
func (m *Manager) UpdatePodCIDR(ctx context.Context, podCIDR string) error {
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	_, err := m.runtimeService.UpdateRuntimeConfig(cctx, &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: podCIDR}},
	})
	if err != nil {
		return fmt.Errorf("CRI UpdateRuntimeConfig: %w", err)
	}
	return nil
}

// GetPods lists the runtime's pods: sandboxes and containers grouped by pod
// UID, newest first. With all=false only ready sandboxes and running
// containers are listed. Containers not created by a kubelet (no pod UID
// label) are left out. Mirrors kubeGenericRuntimeManager.GetPods.
func (m *Manager) GetPods(ctx context.Context, all bool) ([]*container.Pod, error) {
	runtimeName, err := m.runtimeNameOrFetch(ctx)
	if err != nil {
		return nil, err
	}
	sandboxes, err := m.listPodSandboxes(ctx, !all, nil)
	if err != nil {
		return nil, err
	}
	containers, err := m.listContainers(ctx, !all, nil)
	if err != nil {
		return nil, err
	}
	pods := map[types.UID]*container.Pod{}
	podFor := func(uid types.UID, name, namespace string) *container.Pod {
		p, ok := pods[uid]
		if !ok {
			p = &container.Pod{ID: uid, Name: name, Namespace: namespace}
			pods[uid] = p
		}
		return p
	}
	for _, s := range sandboxes {
		md := s.GetMetadata()
		if md == nil || md.GetUid() == "" {
			continue
		}
		p := podFor(types.UID(md.GetUid()), md.GetName(), md.GetNamespace())
		p.Sandboxes = append(p.Sandboxes, &container.Container{
			ID:        container.ContainerID{Type: runtimeName, ID: s.GetId()},
			State:     sandboxToContainerState(s.GetState()),
			CreatedAt: time.Unix(0, s.GetCreatedAt()),
		})
	}
	for _, c := range containers {
		info := getContainerInfoFromLabels(c.GetLabels())
		if info.PodUID == "" {
			continue
		}
		p := podFor(info.PodUID, info.PodName, info.PodNamespace)
		p.Containers = append(p.Containers, &container.Container{
			ID:        container.ContainerID{Type: runtimeName, ID: c.GetId()},
			Name:      info.ContainerName,
			Image:     c.GetImage().GetImage(),
			ImageID:   c.GetImageRef(),
			Hash:      getContainerInfoFromAnnotations(c.GetAnnotations()).Hash,
			State:     toKubeContainerState(c.GetState()),
			CreatedAt: time.Unix(0, c.GetCreatedAt()),
		})
	}
	out := make([]*container.Pod, 0, len(pods))
	for _, p := range pods {
		newestFirst := func(a, b *container.Container) int { return b.CreatedAt.Compare(a.CreatedAt) }
		slices.SortStableFunc(p.Sandboxes, newestFirst)
		slices.SortStableFunc(p.Containers, newestFirst)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *container.Pod) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// GetPodStatus reads everything the runtime has for pod uid: every sandbox's
// status (newest first, pod IPs from the newest if ready) and every
// container's status (newest first). A sandbox or container removed between
// the list and the status call is skipped. Mirrors
// kubeGenericRuntimeManager.GetPodStatus.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	runtimeName, err := m.runtimeNameOrFetch(ctx)
	if err != nil {
		return nil, err
	}
	timestamp := time.Now()
	sandboxes, err := m.listPodSandboxes(ctx, false, map[string]string{kubetypes.KubernetesPodUIDLabel: string(uid)})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(sandboxes, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()) })

	status := &container.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: timestamp}
	for i, s := range sandboxes {
		cctx, cancel := m.callCtx(ctx)
		resp, err := m.runtimeService.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.GetId()})
		cancel()
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("CRI PodSandboxStatus %s: %w", s.GetId(), err)
		}
		if resp.GetStatus() == nil {
			return nil, fmt.Errorf("CRI PodSandboxStatus %s: no status", s.GetId())
		}
		status.SandboxStatuses = append(status.SandboxStatuses, resp.GetStatus())
		if i == 0 && resp.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			status.IPs = determinePodSandboxIPs(resp.GetStatus())
		}
	}

	containers, err := m.listContainers(ctx, false, map[string]string{kubetypes.KubernetesPodUIDLabel: string(uid)})
	if err != nil {
		return nil, err
	}
	for _, c := range containers {
		cctx, cancel := m.callCtx(ctx)
		resp, err := m.runtimeService.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.GetId()})
		cancel()
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("CRI ContainerStatus %s: %w", c.GetId(), err)
		}
		if resp.GetStatus() == nil {
			return nil, fmt.Errorf("CRI ContainerStatus %s: no status", c.GetId())
		}
		cs := toKubeContainerStatus(resp.GetStatus(), runtimeName)
		if resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			// The runtime's message, then what the container wrote for its end.
			if msg := terminationMessage(resp.GetStatus()); msg != "" {
				if cs.Message != "" {
					cs.Message += ": "
				}
				cs.Message += msg
			}
		}
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
	}
	slices.SortStableFunc(status.ContainerStatuses, func(a, b *container.Status) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return status, nil
}

// listPodSandboxes lists sandboxes, only ready ones if readyOnly, only those
// whose labels include selector. The selector is also checked here because a
// runtime may ignore CRI filters.
func (m *Manager) listPodSandboxes(ctx context.Context, readyOnly bool, selector map[string]string) ([]*runtimeapi.PodSandbox, error) {
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: selector}
	if readyOnly {
		filter.State = &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	}
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.runtimeService.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var out []*runtimeapi.PodSandbox
	for _, s := range resp.GetItems() {
		if readyOnly && s.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if !labelsMatch(s.GetLabels(), selector) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// listContainers lists containers, only running ones if runningOnly, only
// those whose labels include selector.
func (m *Manager) listContainers(ctx context.Context, runningOnly bool, selector map[string]string) ([]*runtimeapi.Container, error) {
	filter := &runtimeapi.ContainerFilter{LabelSelector: selector}
	if runningOnly {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	resp, err := m.runtimeService.ListContainers(cctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	var out []*runtimeapi.Container
	for _, c := range resp.GetContainers() {
		if runningOnly && c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if !labelsMatch(c.GetLabels(), selector) {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

func labelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func isNotFound(err error) bool {
	return err != nil && grpcstatus.Code(err) == codes.NotFound
}

// grpcMessage returns the runtime's message of a gRPC error, without the
// "rpc error: code = ..." prefix, as kubelet shows it in the pod status.
func grpcMessage(err error) string {
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

func sandboxToContainerState(s runtimeapi.PodSandboxState) container.State {
	if s == runtimeapi.PodSandboxState_SANDBOX_READY {
		return container.ContainerStateRunning
	}
	return container.ContainerStateExited
}

func toKubeContainerState(s runtimeapi.ContainerState) container.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return container.ContainerStateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return container.ContainerStateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return container.ContainerStateExited
	}
	return container.ContainerStateUnknown
}

// toKubeContainerStatus converts a CRI ContainerStatus. Mirrors kuberuntime's
// toKubeContainerStatus.
func toKubeContainerStatus(s *runtimeapi.ContainerStatus, runtimeName string) *container.Status {
	labeled := getContainerInfoFromLabels(s.GetLabels())
	annotated := getContainerInfoFromAnnotations(s.GetAnnotations())
	name := labeled.ContainerName
	if name == "" {
		name = s.GetMetadata().GetName()
	}
	cs := &container.Status{
		ID:           container.ContainerID{Type: runtimeName, ID: s.GetId()},
		Name:         name,
		State:        toKubeContainerState(s.GetState()),
		CreatedAt:    time.Unix(0, s.GetCreatedAt()),
		Image:        s.GetImage().GetImage(),
		ImageID:      s.GetImageRef(),
		Hash:         annotated.Hash,
		RestartCount: annotated.RestartCount,
	}
	if s.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED && s.GetStartedAt() != 0 {
		cs.StartedAt = time.Unix(0, s.GetStartedAt())
	}
	if s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
		cs.ExitCode = int(s.GetExitCode())
		cs.Reason, cs.Message = s.GetReason(), s.GetMessage()
		if s.GetFinishedAt() != 0 {
			cs.FinishedAt = time.Unix(0, s.GetFinishedAt())
		}
	}
	return cs
}

// determinePodSandboxIPs returns the sandbox's IPs, primary first.
func determinePodSandboxIPs(s *runtimeapi.PodSandboxStatus) []string {
	n := s.GetNetwork()
	if n == nil {
		return nil
	}
	var ips []string
	if n.GetIp() != "" {
		ips = append(ips, n.GetIp())
	}
	for _, ip := range n.GetAdditionalIps() {
		if ip.GetIp() != "" {
			ips = append(ips, ip.GetIp())
		}
	}
	return ips
}
