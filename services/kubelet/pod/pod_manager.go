// Package pod holds the kubelet's desired pods: the latest copy of every pod
// its config source says should run on this node, by UID and by full name.
// It is the kubelet's source of truth for what it wants. Mirrors kubelet's
// pkg/kubelet/pod basicManager (without static/mirror pods).
package pod

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Manager stores the desired pods. Pods are shared with the config source
// and never modified. Safe for concurrent use.
type Manager struct {
	mu        sync.RWMutex
	podByUID  map[types.UID]*v1.Pod
	podByName map[string]*v1.Pod
}

// NewManager returns an empty Manager.
func NewManager() *Manager {
	return &Manager{podByUID: map[types.UID]*v1.Pod{}, podByName: map[string]*v1.Pod{}}
}

func fullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// AddPod stores pod (same as UpdatePod).
func (m *Manager) AddPod(pod *v1.Pod) { m.UpdatePod(pod) }

// UpdatePod stores pod, replacing the copy with its UID.
func (m *Manager) UpdatePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podByUID[pod.UID] = pod
	m.podByName[fullName(pod)] = pod
}

// RemovePod forgets pod.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.podByUID, pod.UID)
	if p, ok := m.podByName[fullName(pod)]; ok && p.UID == pod.UID {
		delete(m.podByName, fullName(pod))
	}
}

// GetPods returns every desired pod.
func (m *Manager) GetPods() []*v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	pods := make([]*v1.Pod, 0, len(m.podByUID))
	for _, p := range m.podByUID {
		pods = append(pods, p)
	}
	return pods
}

// GetPodByUID returns the pod with uid, if desired.
func (m *Manager) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.podByUID[uid]
	return p, ok
}

// GetPodByName returns the pod namespace/name, if desired.
func (m *Manager) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.podByName[name+"_"+namespace]
	return p, ok
}
