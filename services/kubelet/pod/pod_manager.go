// Package pod holds the kubelet's desired pods: the latest copy of every pod
// its config sources say should run on this node, by UID and by full name,
// and apart from them the mirror pods (the API server's copies of static
// pods), which never run. It is the kubelet's source of truth for what it
// wants. Mirrors kubelet's pkg/kubelet/pod basicManager, and its mirror
// client (mirror_client.go).
package pod

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	kubetypes "skiff.dev/services/kubelet/types"
)

// Manager stores the desired pods and the mirror pods. Pods are shared with
// the config source and never modified. Safe for concurrent use.
type Manager struct {
	mu        sync.RWMutex
	podByUID  map[types.UID]*v1.Pod
	podByName map[string]*v1.Pod
	// mirrorPodByUID and mirrorPodByName hold the mirror pods, by their own
	// (API server) UID and by full name, which they share with their static
	// pod.
	mirrorPodByUID  map[types.UID]*v1.Pod
	mirrorPodByName map[string]*v1.Pod
}

// NewManager returns an empty Manager.
func NewManager() *Manager {
	return &Manager{
		podByUID: map[types.UID]*v1.Pod{}, podByName: map[string]*v1.Pod{},
		mirrorPodByUID: map[types.UID]*v1.Pod{}, mirrorPodByName: map[string]*v1.Pod{},
	}
}

// GetPodFullName returns "<name>_<namespace>", the kubelet's key of a pod
// across UIDs (a static pod and its mirror share it). Mirrors
// kubecontainer.GetPodFullName.
func GetPodFullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// AddPod stores pod (same as UpdatePod).
func (m *Manager) AddPod(pod *v1.Pod) { m.UpdatePod(pod) }

// UpdatePod stores pod, replacing the copy with its UID; a mirror pod is
// stored apart.
func (m *Manager) UpdatePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if kubetypes.IsMirrorPod(pod) {
		m.mirrorPodByUID[pod.UID] = pod
		m.mirrorPodByName[GetPodFullName(pod)] = pod
		return
	}
	m.podByUID[pod.UID] = pod
	m.podByName[GetPodFullName(pod)] = pod
}

// RemovePod forgets pod (or mirror pod).
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byUID, byName := m.podByUID, m.podByName
	if kubetypes.IsMirrorPod(pod) {
		byUID, byName = m.mirrorPodByUID, m.mirrorPodByName
	}
	delete(byUID, pod.UID)
	if p, ok := byName[GetPodFullName(pod)]; ok && p.UID == pod.UID {
		delete(byName, GetPodFullName(pod))
	}
}

// GetPods returns every desired pod (never a mirror pod).
func (m *Manager) GetPods() []*v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	pods := make([]*v1.Pod, 0, len(m.podByUID))
	for _, p := range m.podByUID {
		pods = append(pods, p)
	}
	return pods
}

// GetPodByUID returns the desired pod with uid (never a mirror pod).
func (m *Manager) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.podByUID[uid]
	return p, ok
}

// GetPodByName returns the desired pod namespace/name (never a mirror pod).
func (m *Manager) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.podByName[name+"_"+namespace]
	return p, ok
}

// GetMirrorPodByPod returns the mirror pod of the static pod, if the API
// server has one (of whatever hash).
func (m *Manager) GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.mirrorPodByName[GetPodFullName(pod)]
	return p, ok
}

// GetPodByMirrorPod returns the static pod a mirror pod stands for, if the
// kubelet still runs one of that name.
func (m *Manager) GetPodByMirrorPod(mirrorPod *v1.Pod) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.podByName[GetPodFullName(mirrorPod)]
	return p, ok
}

// GetPodAndMirrorPod returns, for a pod or a mirror pod, the desired pod (nil
// if a mirror pod has none), its mirror pod (nil if none), and whether the
// argument was the mirror. Mirrors basicManager.GetPodAndMirrorPod.
func (m *Manager) GetPodAndMirrorPod(pod *v1.Pod) (p, mirrorPod *v1.Pod, wasMirror bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	name := GetPodFullName(pod)
	if kubetypes.IsMirrorPod(pod) {
		return m.podByName[name], pod, true
	}
	return pod, m.mirrorPodByName[name], false
}

// GetOrphanedMirrorPods returns the mirror pods whose static pod is gone.
func (m *Manager) GetOrphanedMirrorPods() []*v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var orphans []*v1.Pod
	for name, mirror := range m.mirrorPodByName {
		if p, ok := m.podByName[name]; !ok || !kubetypes.IsStaticPod(p) {
			orphans = append(orphans, mirror)
		}
	}
	return orphans
}
