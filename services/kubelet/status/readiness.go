package status

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/container"
)

// SetContainerReadiness records a readiness probe's verdict on container id of
// pod podUID at once, without waiting for the pod's next sync: the
// container's ready flag and the pod's Ready and ContainersReady conditions
// (readiness gates included). Unknown pods and containers are ignored.
// Mirrors manager.SetContainerReadiness.
func (m *Manager) SetContainerReadiness(podUID types.UID, id container.ContainerID, ready bool) {
	m.setContainerStatus(podUID, id, func(s *v1.ContainerStatus) bool {
		if s.Ready == ready {
			return false
		}
		s.Ready = ready
		return true
	})
}

// SetContainerStartup records a startup probe's verdict on container id of
// pod podUID: the container's started flag (a container not started is not
// ready either), and the pod's Ready and ContainersReady conditions. Mirrors
// manager.SetContainerStartup.
func (m *Manager) SetContainerStartup(podUID types.UID, id container.ContainerID, started bool) {
	m.setContainerStatus(podUID, id, func(s *v1.ContainerStatus) bool {
		if s.Started != nil && *s.Started == started {
			return false
		}
		s.Started = &started
		if !started {
			s.Ready = false
		}
		return true
	})
}

// setContainerStatus applies change to the cached status of container id and,
// when it changed something, regenerates the readiness conditions and
// caches the result.
func (m *Manager) setContainerStatus(podUID types.UID, id container.ContainerID, change func(*v1.ContainerStatus) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pod, ok := m.podGetter.GetPodByUID(podUID)
	if !ok {
		return
	}
	cached, ok := m.podStatuses[podUID]
	if !ok {
		return
	}
	status := *cached.status.DeepCopy()
	i := slices.IndexFunc(status.ContainerStatuses, func(s v1.ContainerStatus) bool { return s.ContainerID == id.String() })
	if i < 0 || !change(&status.ContainerStatuses[i]) {
		return
	}
	replace := func(c v1.PodCondition) {
		if j := slices.IndexFunc(status.Conditions, func(x v1.PodCondition) bool { return x.Type == c.Type }); j >= 0 {
			status.Conditions[j] = c
			return
		}
		status.Conditions = append(status.Conditions, c)
	}
	replace(GeneratePodReadyCondition(&pod.Spec, status.Conditions, status.ContainerStatuses, status.Phase))
	replace(GenerateContainersReadyCondition(&pod.Spec, status.ContainerStatuses, status.Phase))
	m.updateStatusInternal(pod, status, false, false)
}
