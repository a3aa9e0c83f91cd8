package kubelet

import (
	"context"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/qos"
	"skiff.dev/services/kubelet/status"
)

// Waiting reasons the kubelet reports when it has no better one.
const (
	// ContainerCreating: the container has not been created yet.
	ContainerCreating = "ContainerCreating"
	// PodInitializing: a regular container waits for the init containers.
	PodInitializing = "PodInitializing"
)

// getPhase computes the pod phase from its container statuses (regular and
// init) and restart policy: Pending while a container waits to start (or
// initialization is not done), Running while a container runs or will be
// restarted, Succeeded when every container exited 0 and none will restart,
// Failed when one failed and none will restart. podIsTerminal says the pod
// is being shut down: then exited containers are final whatever the policy.
// Mirrors kubelet_pods.go getPhase (without sidecar containers).
func getPhase(pod *v1.Pod, info []v1.ContainerStatus, podIsTerminal bool) v1.PodPhase {
	spec := pod.Spec
	pendingInitialization, failedInitialization := 0, 0
	for _, c := range spec.InitContainers {
		s, ok := findContainerStatus(info, c.Name)
		if !ok {
			pendingInitialization++
			continue
		}
		switch {
		case s.State.Running != nil:
			pendingInitialization++
		case s.State.Terminated != nil:
			if s.State.Terminated.ExitCode != 0 {
				failedInitialization++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				if s.LastTerminationState.Terminated.ExitCode != 0 {
					failedInitialization++
				}
			} else {
				pendingInitialization++
			}
		default:
			pendingInitialization++
		}
	}

	unknown, running, waiting, stopped, succeeded := 0, 0, 0, 0, 0
	for _, c := range spec.Containers {
		s, ok := findContainerStatus(info, c.Name)
		if !ok {
			unknown++
			continue
		}
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}

	if failedInitialization > 0 && spec.RestartPolicy == v1.RestartPolicyNever {
		return v1.PodFailed
	}
	switch {
	case pendingInitialization > 0, waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if podIsTerminal {
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
		if spec.RestartPolicy == v1.RestartPolicyAlways {
			// Every container is about to be restarted.
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		if spec.RestartPolicy == v1.RestartPolicyNever {
			return v1.PodFailed
		}
		// OnFailure, and a failed container will be restarted.
		return v1.PodRunning
	}
	return v1.PodPending
}

func findContainerStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	i := slices.IndexFunc(statuses, func(s v1.ContainerStatus) bool { return s.Name == name })
	if i < 0 {
		return v1.ContainerStatus{}, false
	}
	return statuses[i], true
}

// generateAPIPodStatus computes the pod's API status from the runtime's view
// (podStatus), building on the last status the kubelet computed (or the
// API's): phase (a terminal phase is never undone), the kubelet-owned
// conditions (PodReadyToStartContainers, Initialized, Ready, ContainersReady,
// PodScheduled=True; others kept from the API), container statuses, host and
// pod IPs and QoS class. Mirrors kubelet_pods.go generateAPIPodStatus.
func (kl *Kubelet) generateAPIPodStatus(pod *v1.Pod, podStatus *container.PodStatus, podIsTerminal bool) v1.PodStatus {
	oldPodStatus, found := kl.statusManager.GetPodStatus(pod.UID)
	if !found {
		oldPodStatus = pod.Status
	}
	s := kl.convertStatusToAPIStatus(pod, podStatus, oldPodStatus)

	all := append(append([]v1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	s.Phase = getPhase(pod, all, podIsTerminal)
	if s.Phase != v1.PodFailed && s.Phase != v1.PodSucceeded {
		// Whatever the runtime shows now (e.g. containers garbage-collected),
		// a pod once terminal stays terminal.
		switch {
		case oldPodStatus.Phase == v1.PodFailed || oldPodStatus.Phase == v1.PodSucceeded:
			s.Phase = oldPodStatus.Phase
		case pod.Status.Phase == v1.PodFailed || pod.Status.Phase == v1.PodSucceeded:
			s.Phase = pod.Status.Phase
		}
	}
	if s.Phase == oldPodStatus.Phase {
		s.Reason, s.Message = oldPodStatus.Reason, oldPodStatus.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}
	// Past its activeDeadlineSeconds the pod is Failed, whatever its containers did
	// once stopped for it (pause exits 0 on SIGTERM), as kube's ShouldEvict overrides
	// the phase; a pod that had succeeded first stays Succeeded.
	if oldPodStatus.Phase != v1.PodSucceeded && pastActiveDeadline(pod, kl.podStartTime(pod), time.Now()) {
		if oldPodStatus.Phase != v1.PodFailed {
			kl.recorder.Eventf(pod, v1.EventTypeNormal, reasonDeadlineExceeded, messageDeadlineExceeded)
		}
		s.Phase, s.Reason, s.Message = v1.PodFailed, reasonDeadlineExceeded, messageDeadlineExceeded
	}

	kl.probeManager.UpdatePodStatus(pod, s)

	for _, c := range pod.Status.Conditions {
		if !status.PodConditionByKubelet(c.Type) {
			s.Conditions = append(s.Conditions, c)
		}
	}
	s.Conditions = append(s.Conditions,
		status.GeneratePodReadyToStartContainersCondition(podStatus),
		status.GeneratePodInitializedCondition(&pod.Spec, s.InitContainerStatuses, s.Phase),
		status.GeneratePodReadyCondition(&pod.Spec, s.Conditions, s.ContainerStatuses, s.Phase),
		status.GenerateContainersReadyCondition(&pod.Spec, s.ContainerStatuses, s.Phase),
	)
	scheduled := v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue}
	if i := slices.IndexFunc(pod.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.PodScheduled }); i >= 0 {
		scheduled = pod.Status.Conditions[i]
		if scheduled.Status != v1.ConditionTrue {
			scheduled.Status = v1.ConditionTrue
			scheduled.Reason, scheduled.Message = "", ""
			scheduled.LastTransitionTime = metav1.Now()
		}
	}
	s.Conditions = append(s.Conditions, scheduled)

	s.HostIP = kl.nodeIP
	s.HostIPs = []v1.HostIP{{IP: kl.nodeIP}}
	if container.IsHostNetworkPod(pod) && s.PodIP == "" {
		s.PodIP = kl.nodeIP
		s.PodIPs = []v1.PodIP{{IP: kl.nodeIP}}
	}
	return *s
}

// convertStatusToAPIStatus builds pod IPs, QoS class and the container
// statuses. Mirrors kubelet's convertStatusToAPIStatus.
func (kl *Kubelet) convertStatusToAPIStatus(pod *v1.Pod, podStatus *container.PodStatus, oldPodStatus v1.PodStatus) *v1.PodStatus {
	var s v1.PodStatus
	for _, ip := range podStatus.IPs {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	s.QOSClass = qos.GetPodQOS(pod)
	hasInit := len(pod.Spec.InitContainers) > 0
	s.ContainerStatuses = kl.convertToAPIContainerStatuses(pod, podStatus, oldPodStatus.ContainerStatuses, pod.Spec.Containers, hasInit, false)
	if hasInit {
		s.InitContainerStatuses = kl.convertToAPIContainerStatuses(pod, podStatus, oldPodStatus.InitContainerStatuses, pod.Spec.InitContainers, hasInit, true)
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		ephemeral := make([]v1.Container, len(pod.Spec.EphemeralContainers))
		for i := range pod.Spec.EphemeralContainers {
			ephemeral[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = kl.convertToAPIContainerStatuses(pod, podStatus, oldPodStatus.EphemeralContainerStatuses, ephemeral, false, false)
	}
	return &s
}

// convertToAPIContainerStatuses returns one status per container of the
// spec: the newest runtime container's state, the one before it as
// lastTerminationState, and, for a container the kubelet will (re)start, the
// reason its last start failed (CrashLoopBackOff, CreateContainerError,
// ErrImagePull, ...) as a waiting state. A container the runtime never
// created is waiting (ContainerCreating, or PodInitializing in a pod with init
// containers, for those too). Mirrors kubelet's convertToAPIContainerStatuses.
func (kl *Kubelet) convertToAPIContainerStatuses(pod *v1.Pod, podStatus *container.PodStatus, previous []v1.ContainerStatus, containers []v1.Container, hasInitContainers, isInitContainer bool) []v1.ContainerStatus {
	convert := func(cs *container.Status) *v1.ContainerStatus {
		cid := cs.ID.String()
		out := &v1.ContainerStatus{
			Name:         cs.Name,
			RestartCount: int32(cs.RestartCount),
			Image:        cs.Image,
			ImageID:      cs.ImageID,
			ContainerID:  cid,
		}
		switch cs.State {
		case container.ContainerStateRunning:
			out.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.StartedAt)}
		case container.ContainerStateCreated:
			// Created but not started: waiting to run.
			out.State.Waiting = &v1.ContainerStateWaiting{}
		case container.ContainerStateExited:
			reason := cs.Reason
			if reason == "" {
				// Runtimes that give no reason get Kubernetes' usual ones.
				reason = "Completed"
				if cs.ExitCode != 0 {
					reason = "Error"
				}
			}
			out.State.Terminated = &v1.ContainerStateTerminated{
				ExitCode:    int32(cs.ExitCode),
				Reason:      reason,
				Message:     cs.Message,
				StartedAt:   metav1.NewTime(cs.StartedAt),
				FinishedAt:  metav1.NewTime(cs.FinishedAt),
				ContainerID: cid,
			}
		default:
			out.State.Waiting = &v1.ContainerStateWaiting{}
		}
		return out
	}

	oldStatuses := make(map[string]v1.ContainerStatus, len(previous))
	for _, s := range previous {
		oldStatuses[s.Name] = s
	}

	// Behind init containers every container not created yet, an init container
	// included, waits with PodInitializing, as kube's kubelet reports it.
	defaultWaiting := ContainerCreating
	if hasInitContainers {
		defaultWaiting = PodInitializing
	}
	statuses := make(map[string]*v1.ContainerStatus, len(containers))
	for _, c := range containers {
		s := &v1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultWaiting}},
		}
		if old, ok := oldStatuses[c.Name]; ok {
			if old.State.Terminated != nil {
				s = old.DeepCopy()
			} else {
				s.RestartCount = old.RestartCount
				s.LastTerminationState = old.LastTerminationState
			}
		}
		statuses[c.Name] = s
	}

	// A container that was running and vanished from the runtime (removed
	// behind the kubelet's back) did terminate; say so rather than report
	// it as never started, which would send the pod back to Pending.
	for _, c := range containers {
		if slices.ContainsFunc(podStatus.ContainerStatuses, func(cs *container.Status) bool {
			return cs.Name == c.Name
		}) {
			continue
		}
		old, ok := oldStatuses[c.Name]
		if !ok || old.State.Terminated != nil || old.State.Running == nil {
			continue
		}
		s := statuses[c.Name]
		if s.State.Waiting == nil || s.State.Waiting.Reason != defaultWaiting || s.LastTerminationState.Terminated != nil {
			continue
		}
		s.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
			Reason:   "ContainerStatusUnknown",
			Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
			ExitCode: 137,
		}
		if pod.DeletionTimestamp == nil {
			s.RestartCount++
		}
	}

	// Newest first (the runtime status is already in that order): the
	// newest instance gives the state, the next the last termination.
	seen := map[string]int{}
	for _, cs := range podStatus.ContainerStatuses {
		if _, ok := statuses[cs.Name]; !ok || seen[cs.Name] >= 2 {
			continue
		}
		s := convert(cs)
		if seen[cs.Name] == 0 {
			// The image the user asked for, not the runtime's resolved
			// reference (which is in imageID).
			if i := slices.IndexFunc(containers, func(c v1.Container) bool { return c.Name == cs.Name }); i >= 0 {
				s.Image = containers[i].Image
			}
			statuses[cs.Name] = s
		} else {
			statuses[cs.Name].LastTerminationState = s.State
		}
		seen[cs.Name]++
	}

	// Containers the kubelet will start again show why they are not
	// running yet.
	for _, c := range containers {
		if isInitContainer {
			if s := podStatus.FindContainerStatusByName(c.Name); s != nil && s.State == container.ContainerStateExited && s.ExitCode == 0 {
				continue
			}
		}
		if !container.ShouldContainerBeRestarted(&c, pod, podStatus) {
			continue
		}
		reason, ok := kl.reasonCache.Get(pod.UID, c.Name)
		if !ok {
			continue
		}
		s := statuses[c.Name]
		if s.State.Terminated != nil {
			s.LastTerminationState = s.State
		}
		s.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason.Err.Error(), Message: reason.Message}}
	}

	out := make([]v1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		out = append(out, *statuses[c.Name])
	}
	if !isInitContainer {
		slices.SortStableFunc(out, func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

// getPullSecretsForPod reads the Secrets of pod.spec.imagePullSecrets from
// the kubelet's secret cache (the Node authorizer lets a node read those of its pods); a
// Secret that cannot be read is logged and skipped, and the pull goes on with
// the others. Mirrors Kubelet.getPullSecretsForPod.
func (kl *Kubelet) getPullSecretsForPod(ctx context.Context, pod *v1.Pod) []v1.Secret {
	var secrets []v1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := kl.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			kl.logger.Warn("unable to retrieve pull secret, the image pull may not succeed", "pod", pod.Namespace+"/"+pod.Name, "secret", ref.Name, "err", err)
			continue
		}
		secrets = append(secrets, *s)
	}
	return secrets
}
