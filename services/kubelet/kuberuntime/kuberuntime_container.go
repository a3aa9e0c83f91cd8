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
)

// startSpec is a container to start: its spec and whether it is an init
// container.
type startSpec struct {
	container *v1.Container
	isInit    bool
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

	cfg, err := m.generateContainerConfig(c, pod, restartCount, imageRef, podIPs)
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
// restartCount. Mirrors kuberuntime's generateContainerConfig (without
// volumes, devices and security contexts beyond namespaces).
func (m *Manager) generateContainerConfig(c *v1.Container, pod *v1.Pod, restartCount int, imageRef string, podIPs []string) (*runtimeapi.ContainerConfig, error) {
	logDir := BuildContainerLogsDirectory(m.podLogsDirectory, pod.Namespace, pod.Name, pod.UID, c.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create container log directory %q: %w", logDir, err)
	}
	envs, err := makeEnvironmentVariables(pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	envMap := make(map[string]string, len(envs))
	for _, e := range envs {
		envMap[e.GetKey()] = string(e.GetValue())
	}
	command := make([]string, len(c.Command))
	for i, s := range c.Command {
		command[i] = expandEnv(s, envMap)
	}
	args := make([]string, len(c.Args))
	for i, s := range c.Args {
		args[i] = expandEnv(s, envMap)
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     command,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Labels:      newContainerLabels(c, pod),
		Annotations: newContainerAnnotations(c, pod, restartCount),
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", restartCount)),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: linuxResources(c),
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: namespacesForPod(pod),
			},
		},
	}, nil
}

// linuxResources maps requests and limits onto cgroup settings as kubelet
// does: CPU shares from the request, CFS quota from the limit (100 ms
// period), memory limit in bytes.
func linuxResources(c *v1.Container) *runtimeapi.LinuxContainerResources {
	const (
		minShares     = 2
		sharesPerCPU  = 1024
		quotaPeriodUs = 100000
	)
	r := &runtimeapi.LinuxContainerResources{CpuShares: minShares}
	if req, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		r.CpuShares = max(req.MilliValue()*sharesPerCPU/1000, minShares)
	} else if lim, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		// The API server defaults a missing request to the limit; be as
		// generous when it did not.
		r.CpuShares = max(lim.MilliValue()*sharesPerCPU/1000, minShares)
	}
	if lim, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		r.CpuPeriod = quotaPeriodUs
		r.CpuQuota = max(lim.MilliValue()*quotaPeriodUs/1000, 1000)
	}
	if lim, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimitInBytes = lim.Value()
	}
	return r
}

// makeEnvironmentVariables resolves the container's env: plain values, and
// valueFrom.fieldRef for the pod fields kubelet knows locally. Values may
// refer to earlier variables as $(NAME). ConfigMap and Secret references are
// refused with an error (CreateContainerConfigError), since skiff's kubelet
// does not read those objects yet.
func makeEnvironmentVariables(pod *v1.Pod, c *v1.Container, podIPs []string) ([]*runtimeapi.KeyValue, error) {
	var out []*runtimeapi.KeyValue
	resolved := map[string]string{}
	for _, e := range c.Env {
		value := e.Value
		switch {
		case e.ValueFrom == nil:
			value = expandEnv(value, resolved)
		case e.ValueFrom.FieldRef != nil:
			v, err := podFieldValue(pod, e.ValueFrom.FieldRef.FieldPath, podIPs)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			value = v
		case e.ValueFrom.ResourceFieldRef != nil:
			return nil, fmt.Errorf("env %s: resourceFieldRef is not supported", e.Name)
		default:
			return nil, fmt.Errorf("env %s: configMapKeyRef and secretKeyRef are not supported", e.Name)
		}
		resolved[e.Name] = value
		out = append(out, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(value)})
	}
	return out, nil
}

// podFieldValue answers the downward-API field paths kubelet resolves
// itself.
func podFieldValue(pod *v1.Pod, path string, podIPs []string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIP":
		if len(podIPs) > 0 {
			return podIPs[0], nil
		}
		return pod.Status.PodIP, nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(key, "']")], nil
	}
	if key, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(key, "']")], nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expandEnv replaces $(NAME) with vars[NAME] when defined and "$$" with "$",
// leaving unknown references as written, like Kubernetes' expansion package.
func expandEnv(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

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
