package kuberuntime

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/events"
	"skiff.dev/services/kubelet/prober/results"
)

// podActions is what SyncPod must do to bring the runtime to the pod's spec.
// Mirrors kuberuntime's podActions.
type podActions struct {
	// KillPod stops every container and the sandbox first.
	KillPod bool
	// CreateSandbox runs a new sandbox with metadata attempt Attempt.
	CreateSandbox bool
	// SandboxID is the current sandbox (the one to kill when replacing it).
	SandboxID string
	Attempt   uint32
	// NextInitContainerToStart is the init container to run now; regular
	// containers wait until every init container has succeeded.
	NextInitContainerToStart *v1.Container
	// ContainersToStart are indexes into pod.Spec.Containers.
	ContainersToStart []int
	// EphemeralContainersToStart are indexes into pod.Spec.EphemeralContainers:
	// those the runtime never ran (one is never restarted).
	EphemeralContainersToStart []int
	// ContainersToKill are running containers to stop (keyed by id).
	ContainersToKill map[container.ContainerID]containerToKillInfo
}

type containerToKillInfo struct {
	container *v1.Container
	name      string
	message   string
	// gracePeriodOverride is the failed probe's terminationGracePeriodSeconds,
	// which replaces the pod's for a liveness or startup kill.
	gracePeriodOverride *int64
}

func shouldRestartOnFailure(pod *v1.Pod) bool {
	return pod.Spec.RestartPolicy != v1.RestartPolicyNever
}

func containerSucceeded(c *v1.Container, podStatus *container.PodStatus) bool {
	s := podStatus.FindContainerStatusByName(c.Name)
	return s != nil && s.State == container.ContainerStateExited && s.ExitCode == 0
}

// computePodActions compares the pod's spec with the runtime's view of it and
// decides what to kill, create and start, honouring restartPolicy (Always
// restarts any exited container, OnFailure only those that exited non-zero,
// Never none) and running init containers one at a time before the regular
// ones. A running container that failed its liveness or startup probe is
// killed (with the probe's terminationGracePeriodSeconds, if set), and
// restarted unless restartPolicy is Never. Crash-loop backoff is
// applied later, when starting. Mirrors kuberuntime's computePodActions
// (without ephemeral and sidecar containers and in-place resize).
func (m *Manager) computePodActions(pod *v1.Pod, podStatus *container.PodStatus) podActions {
	createPodSandbox, attempt, sandboxID := podSandboxChanged(pod, podStatus)
	changes := podActions{
		KillPod:          createPodSandbox,
		CreateSandbox:    createPodSandbox,
		SandboxID:        sandboxID,
		Attempt:          attempt,
		ContainersToKill: map[container.ContainerID]containerToKillInfo{},
	}

	if createPodSandbox {
		// A pod that must not restart and already ran containers gets no new
		// sandbox: it is done, it only needs its old sandbox stopped. With no
		// container statuses at all, creating containers never succeeded, so
		// the sandbox is retried.
		if !shouldRestartOnFailure(pod) && attempt != 0 && len(podStatus.ContainerStatuses) != 0 {
			changes.CreateSandbox = false
			return changes
		}
		var toStart []int
		for i := range pod.Spec.Containers {
			if pod.Spec.RestartPolicy == v1.RestartPolicyOnFailure && containerSucceeded(&pod.Spec.Containers[i], podStatus) {
				continue
			}
			toStart = append(toStart, i)
		}
		if len(toStart) == 0 {
			if _, _, done := findNextInitContainerToRun(pod, podStatus); done {
				changes.CreateSandbox = false
				return changes
			}
		}
		// A new sandbox starts from the first init container again.
		if len(pod.Spec.InitContainers) != 0 {
			changes.NextInitContainerToStart = &pod.Spec.InitContainers[0]
			return changes
		}
		changes.ContainersToStart = toStart
		return changes
	}

	// Ephemeral containers start even while the pod initializes, and only once.
	for i := range pod.Spec.EphemeralContainers {
		if podStatus.FindContainerStatusByName(pod.Spec.EphemeralContainers[i].Name) == nil {
			changes.EphemeralContainersToStart = append(changes.EphemeralContainersToStart, i)
		}
	}

	initLastStatus, next, done := findNextInitContainerToRun(pod, podStatus)
	if !done {
		if next != nil {
			initFailed := initLastStatus != nil && isInitContainerFailed(initLastStatus)
			if initFailed && !shouldRestartOnFailure(pod) {
				changes.KillPod = true
			} else {
				if initLastStatus != nil && initLastStatus.State == container.ContainerStateUnknown {
					changes.ContainersToKill[initLastStatus.ID] = containerToKillInfo{
						container: next, name: next.Name,
						message: fmt.Sprintf("Init container is in %q state, try killing it before restart", initLastStatus.State),
					}
				}
				changes.NextInitContainerToStart = next
			}
		}
		// Regular containers wait for initialization.
		return changes
	}

	keepCount := 0
	for idx := range pod.Spec.Containers {
		c := &pod.Spec.Containers[idx]
		cs := podStatus.FindContainerStatusByName(c.Name)
		if cs == nil || cs.State != container.ContainerStateRunning {
			if container.ShouldContainerBeRestarted(c, pod, podStatus) {
				changes.ContainersToStart = append(changes.ContainersToStart, idx)
				if cs != nil && cs.State == container.ContainerStateUnknown {
					// Its real state is unknown: make sure it is not running
					// before another instance starts.
					changes.ContainersToKill[cs.ID] = containerToKillInfo{
						container: c, name: c.Name,
						message: fmt.Sprintf("Container is in %q state, try killing it before restart", cs.State),
					}
				}
			}
			continue
		}
		// A running container is kept unless its spec changed (the image,
		// for a pod object), then it is replaced whatever the restart
		// policy, or it failed its liveness or startup probe.
		if cs.Hash != 0 && cs.Hash != container.HashContainer(c) {
			changes.ContainersToStart = append(changes.ContainersToStart, idx)
			changes.ContainersToKill[cs.ID] = containerToKillInfo{
				container: c, name: c.Name,
				message: fmt.Sprintf("Container %s definition changed, will be restarted", c.Name),
			}
			continue
		}
		message, probe, failed := m.probeFailure(c, cs.ID)
		if !failed {
			keepCount++
			continue
		}
		if shouldRestartOnFailure(pod) {
			message += ", will be restarted"
			changes.ContainersToStart = append(changes.ContainersToStart, idx)
		}
		info := containerToKillInfo{container: c, name: c.Name, message: message}
		if pod.DeletionGracePeriodSeconds == nil && probe.TerminationGracePeriodSeconds != nil {
			info.gracePeriodOverride = probe.TerminationGracePeriodSeconds
		}
		changes.ContainersToKill[cs.ID] = info
	}
	if keepCount == 0 && len(changes.ContainersToStart) == 0 {
		changes.KillPod = true
	}
	return changes
}

// SyncPod drives the runtime towards pod's spec from podStatus, the runtime's
// current view, in kubelet's steps: (1) compute the actions; (2) kill the pod
// if its sandbox must be replaced (or nothing should run any more); (3) kill
// unwanted containers; (4) create the sandbox; (5) start the ephemeral containers
// never run and the next init container; (6) start the containers, except those in crash-loop backoff
// (backOff, keyed per pod and container spec: 10 s doubling to 300 s). Every
// step's outcome is in the returned result; its Error() is nil when all
// succeeded. Mirrors kubeGenericRuntimeManager.SyncPod.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus, backOff *flowcontrol.Backoff) (result container.PodSyncResult) {
	runtimeName, err := m.runtimeNameOrFetch(ctx)
	if err != nil {
		result.Fail(err)
		return result
	}

	// Step 1.
	changes := m.computePodActions(pod, podStatus)
	m.logger.Debug("computePodActions", "pod", podRef(pod), "createSandbox", changes.CreateSandbox, "killPod", changes.KillPod,
		"start", changes.ContainersToStart, "kill", len(changes.ContainersToKill))

	// Step 2.
	if changes.KillPod {
		running := container.ConvertPodStatusToRunningPod(runtimeName, podStatus)
		if !running.IsEmpty() {
			if changes.CreateSandbox {
				m.logger.Info("stopping pod sandbox, will start a new one", "pod", podRef(pod))
			} else {
				m.logger.Info("stopping pod sandbox, no container will run any more", "pod", podRef(pod))
			}
		}
		killResult := m.killPodWithSyncResult(ctx, pod, running, nil)
		result.AddPodSyncResult(killResult)
		if killResult.Error() != nil {
			return result
		}
		if changes.CreateSandbox {
			m.purgeInitContainers(ctx, pod, podStatus)
		}
	} else {
		// Step 3.
		for id, info := range changes.ContainersToKill {
			r := container.NewSyncResult(container.KillContainer, info.name)
			result.AddSyncResult(r)
			if err := m.killContainer(ctx, pod, id, info.name, info.message, info.gracePeriodOverride); err != nil {
				r.Fail(container.ErrKillContainer, err.Error())
				return result
			}
		}
	}

	// Step 4.
	podIPs := slices.Clone(podStatus.IPs)
	podSandboxID := changes.SandboxID
	sandboxConfig, err := m.generatePodSandboxConfig(pod, changes.Attempt)
	if err != nil {
		msg := fmt.Sprintf("Failed to generate sandbox config for pod %q: %v", podRef(pod), err)
		r := container.NewSyncResult(container.ConfigPodSandbox, podRef(pod))
		result.AddSyncResult(r)
		r.Fail(container.ErrConfigPodSandbox, msg)
		return result
	}
	if changes.CreateSandbox {
		r := container.NewSyncResult(container.CreatePodSandbox, podRef(pod))
		result.AddSyncResult(r)
		id, msg, err := m.createPodSandbox(ctx, pod, sandboxConfig)
		if err != nil {
			m.logger.Error("failed to create pod sandbox", "pod", podRef(pod), "err", err)
			r.Fail(container.ErrCreatePodSandbox, msg)
			m.recordContainerEvent(pod, nil, v1.EventTypeWarning, events.FailedCreatePodSandBox, "%s", msg)
			return result
		}
		podSandboxID = id
		m.logger.Info("created pod sandbox", "pod", podRef(pod), "sandboxID", id, "attempt", changes.Attempt)
		cctx, cancel := m.callCtx(ctx)
		resp, err := m.runtimeService.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		cancel()
		if err != nil {
			result.Fail(fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err))
			return result
		}
		if !container.IsHostNetworkPod(pod) {
			// The new sandbox's IPs replace the old ones for the
			// containers' environment (status.podIP).
			podIPs = determinePodSandboxIPs(resp.GetStatus())
		}
	}

	start := func(kind string, spec startSpec) error {
		r := container.NewSyncResult(container.StartContainer, spec.container.Name)
		result.AddSyncResult(r)
		if inBackOff, msg, err := doBackOff(pod, spec.container, podStatus, backOff); inBackOff {
			m.recordContainerEvent(pod, spec.container, v1.EventTypeWarning, events.BackOffStartContainer,
				"Back-off restarting failed container %s in pod %s", spec.container.Name, podRef(pod))
			r.Fail(err, msg)
			return err
		}
		if msg, err := m.startContainer(ctx, podSandboxID, sandboxConfig, spec, pod, podStatus, podIPs); err != nil {
			r.Fail(err, msg)
			m.logger.Info("failed to start "+kind, "pod", podRef(pod), "container", spec.container.Name, "reason", err, "message", msg)
			return err
		}
		return nil
	}

	// Step 5: ephemeral containers first, so that a pod whose initialization fails
	// can still be debugged.
	for _, idx := range changes.EphemeralContainersToStart {
		ec := &pod.Spec.EphemeralContainers[idx]
		_ = start("ephemeral container", startSpec{container: (*v1.Container)(&ec.EphemeralContainerCommon), target: ec.TargetContainerName})
	}
	if next := changes.NextInitContainerToStart; next != nil {
		if err := start("init container", startSpec{container: next, isInit: true}); err != nil {
			return result
		}
	}

	// Step 6.
	for _, idx := range changes.ContainersToStart {
		_ = start("container", startSpec{container: &pod.Spec.Containers[idx]})
	}
	return result
}

// probeFailure says whether running container id (of spec c) failed its
// liveness or startup probe, with the Killing event's message and the probe.
func (m *Manager) probeFailure(c *v1.Container, id container.ContainerID) (string, *v1.Probe, bool) {
	if m.livenessManager != nil && c.LivenessProbe != nil {
		if r, ok := m.livenessManager.Get(id); ok && r == results.Failure {
			return fmt.Sprintf("Container %s failed liveness probe", c.Name), c.LivenessProbe, true
		}
	}
	if m.startupManager != nil && c.StartupProbe != nil {
		if r, ok := m.startupManager.Get(id); ok && r == results.Failure {
			return fmt.Sprintf("Container %s failed startup probe", c.Name), c.StartupProbe, true
		}
	}
	return "", nil, false
}

// doBackOff reports whether container c must wait before restarting: its
// last attempt exited less than the current backoff ago. When it may start,
// the backoff grows for next time. Mirrors kuberuntime's doBackOff.
func doBackOff(pod *v1.Pod, c *v1.Container, podStatus *container.PodStatus, backOff *flowcontrol.Backoff) (bool, string, error) {
	var last *container.Status
	for _, s := range podStatus.ContainerStatuses {
		if s.Name == c.Name && s.State == container.ContainerStateExited {
			last = s
			break
		}
	}
	if last == nil {
		return false, "", nil
	}
	key := getStableKey(pod, c)
	if backOff.IsInBackOffSince(key, last.FinishedAt) {
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backOff.Get(key), c.Name, pod.Name, pod.Namespace, pod.UID)
		return true, msg, container.ErrCrashLoopBackOff
	}
	backOff.Next(key, last.FinishedAt)
	return false, "", nil
}

// getStableKey identifies a container of a pod across restarts, and a new
// spec (hash) as a new container, for the backoff.
func getStableKey(pod *v1.Pod, c *v1.Container) string {
	return fmt.Sprintf("%s_%s_%s_%s_%x", pod.Name, pod.Namespace, pod.UID, c.Name, container.HashContainer(c))
}
