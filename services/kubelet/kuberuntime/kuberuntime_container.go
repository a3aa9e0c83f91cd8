package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/events"
	"skiff.dev/services/kubelet/expansion"
	"skiff.dev/services/kubelet/qos"
)

// startSpec is a container to start: its spec and whether it is an init
// container.
type startSpec struct {
	container *v1.Container
	isInit    bool
	// target is an ephemeral container's targetContainerName: it joins that
	// container's process namespace.
	target string
}

// startContainer pulls the image, creates the container, starts it and runs
// its postStart hook; a failed hook (FailedPostStartHook event) kills the
// container, which restarts per restartPolicy. On failure it returns a
// message for the pod status and one of container's Err* values. Mirrors
// kuberuntime's startContainer.
func (m *Manager) startContainer(ctx context.Context, podSandboxID string, sandboxConfig *runtimeapi.PodSandboxConfig, spec startSpec, pod *v1.Pod, podStatus *container.PodStatus, podIPs []string) (string, error) {
	c := spec.container
	imageRef, msg, err := m.imagePuller.EnsureImageExists(ctx, pod, c, sandboxConfig)
	if err != nil {
		return msg, err
	}

	// The restart count is one more than the previous attempt's, which the
	// runtime remembers in the annotation. When the runtime lost its
	// containers (a reboot), the log directory still shows how many attempts
	// there were, so the new log does not overwrite an old one.
	restartCount := 0
	if prev := podStatus.FindContainerStatusByName(c.Name); prev != nil {
		restartCount = prev.RestartCount + 1
	} else {
		logDir := BuildContainerLogsDirectory(m.podLogsDirectory, pod.Namespace, pod.Name, pod.UID, c.Name)
		restartCount = calcRestartCountByLogDir(logDir)
	}

	cfg, err := m.generateContainerConfig(ctx, c, pod, restartCount, imageRef, podIPs)
	if err == nil && spec.target != "" {
		err = targetNamespace(cfg, spec.target, podStatus)
	}
	if err != nil {
		m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.FailedToCreateContainer, "Error: %v", err)
		return err.Error(), container.ErrCreateContainerConfig
	}

	cctx, cancel := m.callCtx(ctx)
	resp, err := m.runtimeService.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podSandboxID, Config: cfg, SandboxConfig: sandboxConfig,
	})
	cancel()
	if err != nil {
		m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.FailedToCreateContainer, "Error: %v", grpcMessage(err))
		return grpcMessage(err), container.ErrCreateContainer
	}
	containerID := resp.GetContainerId()
	m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.CreatedContainer, "Created container: %v", c.Name)

	cctx, cancel = m.callCtx(ctx)
	_, err = m.runtimeService.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	cancel()
	if err != nil {
		m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.FailedToStartContainer, "Error: %v", grpcMessage(err))
		return grpcMessage(err), container.ErrRunContainer
	}
	m.recordContainerEvent(pod, c, v1.EventTypeNormal, events.StartedContainer, "Started container %v", c.Name)
	m.logger.Debug("started container", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "containerID", containerID, "restartCount", restartCount)

	// Step 4: the post-start hook.
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		id := container.ContainerID{Type: m.Type(), ID: containerID}
		if msg, err := m.runner.Run(ctx, id, pod, c, c.Lifecycle.PostStart); err != nil {
			m.logger.Info("postStart hook failed", "pod", podRef(pod), "container", c.Name, "err", err)
			m.recordContainerEvent(pod, c, v1.EventTypeWarning, events.FailedPostStartHook, "%s", msg)
			if err := m.killContainer(ctx, pod, id, c.Name, "FailedPostStartHook", nil); err != nil {
				m.logger.Error("failed to kill container after its postStart hook failed", "pod", podRef(pod), "container", c.Name, "err", err)
			}
			return msg, container.ErrPostStartHook
		}
	}
	return "", nil
}

// calcRestartCountByLogDir returns one more than the highest <n>.log in dir,
// 0 when there is none.
func calcRestartCountByLogDir(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	count := 0
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log"))
		if err != nil || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		count = max(count, n+1)
	}
	return count
}

// generateContainerConfig builds the CreateContainer config for attempt
// restartCount: the environment and mounts the RuntimeHelper resolves,
// command and args with $(VAR) expanded from that environment, and the
// cgroup resources and oom_score_adj of the container's requests, limits
// and QoS class, the security context (containerSecurityContext; a container
// whose runAsNonRoot its user breaks is refused), and the termination message
// file. Mirrors kuberuntime's generateContainerConfig (without devices).
func (m *Manager) generateContainerConfig(ctx context.Context, c *v1.Container, pod *v1.Pod, restartCount int, imageRef string, podIPs []string) (*runtimeapi.ContainerConfig, error) {
	opts, err := m.runtimeHelper.GenerateRunContainerOptions(ctx, pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	logDir := BuildContainerLogsDirectory(m.podLogsDirectory, pod.Namespace, pod.Name, pod.UID, c.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create container log directory %q: %w", logDir, err)
	}
	envs := make([]*runtimeapi.KeyValue, len(opts.Envs))
	envMap := make(map[string]string, len(opts.Envs))
	for i, e := range opts.Envs {
		envs[i] = &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)}
		envMap[e.Name] = e.Value
	}
	mounts, err := makeMounts(opts.Mounts, isPrivileged(c))
	if err != nil {
		return nil, err
	}
	if sc := effectiveSecurityContext(pod, c); sc.ProcMount != nil && *sc.ProcMount == v1.UnmaskedProcMount {
		// The masked and read-only /proc paths are the runtime's defaults; this kubelet
		// cannot lift them, so it refuses rather than run the container masked.
		return nil, fmt.Errorf("procMount %s is not supported by this kubelet", v1.UnmaskedProcMount)
	}
	if tm, err := terminationMessageMount(c, opts.PodContainerDir); err != nil {
		return nil, err
	} else if tm != nil {
		mounts = append(mounts, tm)
	}
	if sc := effectiveSecurityContext(pod, c); sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && sc.RunAsUser == nil {
		uid, user, err := m.imageUser(ctx, imageRef)
		if err != nil {
			return nil, err
		}
		if err := verifyRunAsNonRoot(pod, c, uid, user); err != nil {
			return nil, err
		}
	} else if err := verifyRunAsNonRoot(pod, c, nil, ""); err != nil {
		return nil, err
	}
	mapping := expansion.MappingFuncFor(envMap)
	command := make([]string, len(c.Command))
	for i, s := range c.Command {
		command[i] = expansion.Expand(s, mapping)
	}
	args := make([]string, len(c.Args))
	for i, s := range c.Args {
		args[i] = expansion.Expand(s, mapping)
	}
	resources := calculateLinuxResources(c)
	resources.OomScoreAdj = int64(qos.GetContainerOOMScoreAdjust(pod, c, m.memoryCapacity))
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     command,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      mounts,
		Labels:      newContainerLabels(c, pod),
		Annotations: newContainerAnnotations(c, pod, restartCount),
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", restartCount)),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       resources,
			SecurityContext: containerSecurityContext(pod, c),
		},
	}, nil
}

// makeMounts turns the resolved mounts into CRI mounts: SELinux relabelling
// off, propagation private unless the volumeMount asks for HostToContainer
// or (privileged containers only) Bidirectional. Mirrors kuberuntime's
// makeMounts and translateMountPropagation.
func makeMounts(mounts []container.Mount, privileged bool) ([]*runtimeapi.Mount, error) {
	out := make([]*runtimeapi.Mount, 0, len(mounts))
	for _, mt := range mounts {
		propagation := runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		if mt.Propagation != nil {
			switch *mt.Propagation {
			case v1.MountPropagationNone:
			case v1.MountPropagationHostToContainer:
				propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case v1.MountPropagationBidirectional:
				if !privileged {
					return nil, fmt.Errorf("volume %q: Bidirectional mount propagation is available only to privileged containers", mt.Name)
				}
				propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			default:
				return nil, fmt.Errorf("volume %q: invalid MountPropagation mode: %q", mt.Name, *mt.Propagation)
			}
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath:  mt.ContainerPath,
			HostPath:       mt.HostPath,
			Readonly:       mt.ReadOnly,
			SelinuxRelabel: false,
			Propagation:    propagation,
		})
	}
	return out, nil
}

func isPrivileged(c *v1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// CFS and cpu.shares constants, kube's (pkg/kubelet/cm).
const (
	minShares     = 2
	sharesPerCPU  = 1024
	milliCPUToCPU = 1000
	// quotaPeriod is the CFS period in microseconds (100 ms).
	quotaPeriod = 100000
	// minQuotaPeriod is the smallest CFS quota in microseconds (1 ms).
	minQuotaPeriod = 1000
)

// calculateLinuxResources maps requests and limits onto cgroup settings:
// cpu_shares from the CPU request (the limit when only a limit is set; 2
// with neither), cpu_period 100 ms with cpu_quota from the CPU limit (0: no
// quota), and memory_limit_in_bytes from the memory limit (0: none).
// Mirrors kuberuntime's calculateLinuxResources.
func calculateLinuxResources(c *v1.Container) *runtimeapi.LinuxContainerResources {
	cpuRequest, hasRequest := c.Resources.Requests[v1.ResourceCPU]
	cpuLimit, hasLimit := c.Resources.Limits[v1.ResourceCPU]
	r := &runtimeapi.LinuxContainerResources{CpuPeriod: quotaPeriod}
	if (!hasRequest || cpuRequest.IsZero()) && hasLimit && !cpuLimit.IsZero() {
		// The API server defaults a missing request to the limit; do the
		// same for pods it did not default.
		r.CpuShares = milliCPUToShares(cpuLimit.MilliValue())
	} else {
		r.CpuShares = milliCPUToShares(cpuRequest.MilliValue())
	}
	if hasLimit {
		r.CpuQuota = milliCPUToQuota(cpuLimit.MilliValue(), quotaPeriod)
	}
	if lim, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimitInBytes = lim.Value()
	}
	return r
}

// milliCPUToShares converts millicores to cpu.shares (1 core = 1024),
// never below 2. Mirrors cm.MilliCPUToShares.
func milliCPUToShares(milliCPU int64) int64 {
	if milliCPU == 0 {
		return minShares
	}
	return max(milliCPU*sharesPerCPU/milliCPUToCPU, minShares)
}

// milliCPUToQuota converts millicores to a CFS quota for period (µs): 0 for
// no limit, never below 1 ms. Mirrors cm.MilliCPUToQuota.
func milliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*period/milliCPUToCPU, minQuotaPeriod)
}

// plainRuntimeHelper serves a Manager used without a kubelet: env values
// with $(VAR) expansion only; valueFrom, envFrom and volume mounts are
// refused, since resolving them needs the kubelet.
type plainRuntimeHelper struct{}

func (plainRuntimeHelper) GenerateRunContainerOptions(_ context.Context, _ *v1.Pod, c *v1.Container, _ []string) (*container.RunContainerOptions, error) {
	if len(c.EnvFrom) > 0 || len(c.VolumeMounts) > 0 {
		return nil, fmt.Errorf("container %q: envFrom and volumeMounts need the kubelet's RuntimeHelper", c.Name)
	}
	opts := &container.RunContainerOptions{}
	vars := map[string]string{}
	mapping := expansion.MappingFuncFor(vars)
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("env %s: valueFrom needs the kubelet's RuntimeHelper", e.Name)
		}
		v := expansion.Expand(e.Value, mapping)
		vars[e.Name] = v
		opts.Envs = append(opts.Envs, container.EnvVar{Name: e.Name, Value: v})
	}
	return opts, nil
}

func (plainRuntimeHelper) GetPodCgroupParent(*v1.Pod) string { return "" }

// killContainer stops one container, giving it the pod's grace period (the
// deletion grace period once the pod is being deleted, else
// terminationGracePeriodSeconds), or gracePeriodOverride: its preStop hook
// runs first, within that period (FailedPreStopHook on failure), and
// StopContainer gets what remains, never less than 2 s. Mirrors
// kuberuntime's killContainer.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, id container.ContainerID, name, reason string, gracePeriodOverride *int64) error {
	gracePeriod := int64(minimumGracePeriodInSeconds)
	if pod != nil {
		switch {
		case pod.DeletionGracePeriodSeconds != nil:
			gracePeriod = *pod.DeletionGracePeriodSeconds
		case pod.Spec.TerminationGracePeriodSeconds != nil:
			gracePeriod = *pod.Spec.TerminationGracePeriodSeconds
		}
	}
	if gracePeriodOverride != nil {
		gracePeriod = *gracePeriodOverride
	}

	m.logger.Info("killing container", "pod", podRef(pod), "container", name, "containerID", id.String(), "gracePeriod", gracePeriod, "reason", reason)
	if pod != nil {
		msg := fmt.Sprintf("Stopping container %s", name)
		if reason != "" {
			msg = reason
		}
		m.recordContainerEvent(pod, containerByName(pod, name), v1.EventTypeNormal, events.KillingContainer, "%s", msg)
		if spec := containerByName(pod, name); spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && gracePeriod > 0 {
			gracePeriod -= m.executePreStopHook(ctx, pod, id, spec, gracePeriod)
		}
	}
	// A container always gets a short window to stop before SIGKILL.
	gracePeriod = max(gracePeriod, minimumGracePeriodInSeconds)
	// StopContainer blocks for up to the grace period, so its deadline is
	// the grace period on top of the usual request timeout.
	cctx, cancel := context.WithTimeout(ctx, time.Duration(gracePeriod)*time.Second+m.requestTimeout)
	defer cancel()
	_, err := m.runtimeService.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: id.ID, Timeout: gracePeriod})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("CRI StopContainer %s (%s): %w", id.ID, name, err)
	}
	return nil
}

// executePreStopHook runs spec's preStop hook for at most gracePeriod
// seconds and returns the whole seconds it took. A failure is reported as a
// FailedPreStopHook event whose message does not repeat the hook's output
// (it may hold secrets). Mirrors kuberuntime's executePreStopHook.
func (m *Manager) executePreStopHook(ctx context.Context, pod *v1.Pod, id container.ContainerID, spec *v1.Container, gracePeriod int64) int64 {
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, time.Duration(gracePeriod)*time.Second)
	defer cancel()
	_, err := m.runner.Run(hctx, id, pod, spec, spec.Lifecycle.PreStop)
	switch {
	case err == nil:
	case hctx.Err() != nil && ctx.Err() == nil:
		// Out of time, not failed: the container is stopped now.
		m.logger.Info("preStop hook not completed in grace period", "pod", podRef(pod), "container", spec.Name, "gracePeriod", gracePeriod)
	default:
		m.logger.Info("preStop hook failed", "pod", podRef(pod), "container", spec.Name, "err", err)
		m.recordContainerEvent(pod, spec, v1.EventTypeWarning, events.FailedPreStopHook, "PreStopHook failed")
	}
	return int64(time.Since(start).Seconds())
}

// killContainersWithSyncResult stops the running containers of runningPod in
// parallel, so each gets its full grace period.
func (m *Manager) killContainersWithSyncResult(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) []*container.SyncResult {
	if pod == nil {
		// A pod only the runtime knows: its identity is all there is, and
		// the grace period falls back to the minimum.
		pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: runningPod.Name, Namespace: runningPod.Namespace, UID: runningPod.ID}}
	}
	results := make([]*container.SyncResult, len(runningPod.Containers))
	var wg sync.WaitGroup
	for i, c := range runningPod.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := container.NewSyncResult(container.KillContainer, c.Name)
			if err := m.killContainer(ctx, pod, c.ID, c.Name, "pod is terminating", gracePeriodOverride); err != nil {
				r.Fail(container.ErrKillContainer, err.Error())
			}
			results[i] = r
		}()
	}
	wg.Wait()
	return results
}

// KillPod stops every container of runningPod (in parallel, each with the
// pod's grace period or gracePeriodOverride seconds) and then its sandboxes.
// pod may be nil for a pod known only to the runtime. Sandboxes are stopped,
// not removed: garbage collection removes them. Mirrors
// kubeGenericRuntimeManager.KillPod.
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) error {
	result := m.killPodWithSyncResult(ctx, pod, runningPod, gracePeriodOverride)
	return result.Error()
}

func (m *Manager) killPodWithSyncResult(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) container.PodSyncResult {
	var result container.PodSyncResult
	result.AddSyncResult(m.killContainersWithSyncResult(ctx, pod, runningPod, gracePeriodOverride)...)
	sandboxResult := container.NewSyncResult(container.KillPodSandbox, string(runningPod.ID))
	result.AddSyncResult(sandboxResult)
	for _, s := range runningPod.Sandboxes {
		cctx, cancel := m.callCtx(ctx)
		_, err := m.runtimeService.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.ID.ID})
		cancel()
		if err != nil && !isNotFound(err) {
			sandboxResult.Fail(container.ErrKillPodSandbox, err.Error())
		}
	}
	return result
}

// removeContainer removes an exited container; NotFound is success.
func (m *Manager) removeContainer(ctx context.Context, id string) error {
	cctx, cancel := m.callCtx(ctx)
	defer cancel()
	_, err := m.runtimeService.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("CRI RemoveContainer %s: %w", id, err)
	}
	return nil
}

// purgeInitContainers removes the pod's old init containers, so that a new
// sandbox runs them all again from the first.
func (m *Manager) purgeInitContainers(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus) {
	init := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		init[c.Name] = true
	}
	for _, s := range podStatus.ContainerStatuses {
		if !init[s.Name] || s.State == container.ContainerStateRunning {
			continue
		}
		if err := m.removeContainer(ctx, s.ID.ID); err != nil {
			m.logger.Error("failed to remove init container", "pod", podRef(pod), "container", s.Name, "err", err)
		}
	}
}

// findNextInitContainerToRun returns, for a pod whose regular containers have
// not started, the status of the last failed init container (if any), the
// next init container to run, and whether initialization is done. Mirrors
// kuberuntime's findNextInitContainerToRun.
func findNextInitContainerToRun(pod *v1.Pod, podStatus *container.PodStatus) (lastStatus *container.Status, next *v1.Container, done bool) {
	if len(pod.Spec.InitContainers) == 0 {
		return nil, nil, true
	}
	// A running regular container proves initialization finished, even if
	// the init containers were garbage-collected since.
	for i := range pod.Spec.Containers {
		if s := podStatus.FindContainerStatusByName(pod.Spec.Containers[i].Name); s != nil && s.State == container.ContainerStateRunning {
			return nil, nil, true
		}
	}
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		if s := podStatus.FindContainerStatusByName(c.Name); s != nil && isInitContainerFailed(s) {
			return s, c, false
		}
	}
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		s := podStatus.FindContainerStatusByName(pod.Spec.InitContainers[i].Name)
		if s == nil {
			continue
		}
		if s.State == container.ContainerStateRunning {
			return nil, nil, false
		}
		if s.State == container.ContainerStateExited {
			if i == len(pod.Spec.InitContainers)-1 {
				return nil, nil, true
			}
			return nil, &pod.Spec.InitContainers[i+1], false
		}
	}
	return nil, &pod.Spec.InitContainers[0], false
}

func isInitContainerFailed(s *container.Status) bool {
	return s.Reason == "OOMKilled" ||
		(s.State == container.ContainerStateExited && s.ExitCode != 0) ||
		s.State == container.ContainerStateUnknown
}

func podRef(pod *v1.Pod) string {
	if pod == nil {
		return ""
	}
	return pod.Namespace + "/" + pod.Name
}

// RunInContainer runs cmd in the running container id with CRI ExecSync and
// returns stdout followed by stderr; a non-zero exit is a
// *container.ExitError, a timeout container.ErrCommandTimedOut. timeout is
// rounded up to whole seconds (CRI's unit); 0 means none. Mirrors
// kubeGenericRuntimeManager.RunInContainer.
func (m *Manager) RunInContainer(ctx context.Context, id container.ContainerID, cmd []string, timeout time.Duration) ([]byte, error) {
	seconds := int64((timeout + time.Second - 1) / time.Second)
	// The runtime enforces the timeout; the call's own deadline leaves it
	// room to answer.
	callTimeout := m.requestTimeout
	if seconds > 0 {
		callTimeout = time.Duration(seconds)*time.Second + m.requestTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := m.runtimeService.ExecSync(cctx, &runtimeapi.ExecSyncRequest{ContainerId: id.ID, Cmd: cmd, Timeout: seconds})
	if err != nil {
		if grpcstatus.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			return nil, container.ErrCommandTimedOut
		}
		return nil, fmt.Errorf("CRI ExecSync %s: %s", id.ID, grpcMessage(err))
	}
	out := append(resp.GetStdout(), resp.GetStderr()...)
	if resp.GetExitCode() != 0 {
		return out, &container.ExitError{Code: int(resp.GetExitCode())}
	}
	return out, nil
}

// targetNamespace puts an ephemeral container in the process namespace of its target
// container, the running one named target. Mirrors kuberuntime's
// generateContainerConfig for an ephemeral container's TargetContainerName.
func targetNamespace(cfg *runtimeapi.ContainerConfig, target string, podStatus *container.PodStatus) error {
	cs := podStatus.FindContainerStatusByName(target)
	if cs == nil || cs.State != container.ContainerStateRunning {
		return fmt.Errorf("target container %q is not running", target)
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, cs.ID.ID
	return nil
}
