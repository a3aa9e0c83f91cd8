package queue

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/scheduler/framework"
)

// Nominator keeps the pods nominated to nodes: pods for which preemption is making
// room (status.nominatedNodeName). Filters count them on their node for pods of no
// higher priority. Safe for concurrent use. Mirrors kube-scheduler's nominator
// (pkg/scheduler/backend/queue).
type Nominator struct {
	mu sync.RWMutex
	// nominatedPods are the pods nominated to each node.
	nominatedPods map[string][]*framework.PodInfo
	// nominatedPodToNode is each nominated pod's node.
	nominatedPodToNode map[types.UID]string
}

var _ framework.PodNominator = (*Nominator)(nil)

// NewNominator returns an empty Nominator.
func NewNominator() *Nominator {
	return &Nominator{nominatedPods: map[string][]*framework.PodInfo{}, nominatedPodToNode: map[types.UID]string{}}
}

// AddNominatedPod nominates pi's pod to nodeName, or to its status.nominatedNodeName
// when nodeName is ""; a pod nominated nowhere is only forgotten.
func (n *Nominator) AddNominatedPod(pi *framework.PodInfo, nodeName string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.add(pi, nodeName)
}

func (n *Nominator) add(pi *framework.PodInfo, nodeName string) {
	n.delete(pi.Pod)
	if nodeName == "" {
		nodeName = pi.Pod.Status.NominatedNodeName
	}
	if nodeName == "" {
		return
	}
	n.nominatedPodToNode[pi.Pod.UID] = nodeName
	n.nominatedPods[nodeName] = append(n.nominatedPods[nodeName], pi)
}

// UpdateNominatedPod replaces the pod's object, keeping the nomination made in this
// scheduler when neither the old nor the new object carries one yet (the status write
// is still on its way); a nomination added, changed or cleared in the object wins.
func (n *Nominator) UpdateNominatedPod(oldPod *v1.Pod, newInfo *framework.PodInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nodeName := ""
	if oldPod.Status.NominatedNodeName == "" && newInfo.Pod.Status.NominatedNodeName == "" {
		nodeName = n.nominatedPodToNode[oldPod.UID]
	}
	n.add(newInfo, nodeName)
}

// DeleteNominatedPodIfExists forgets the pod's nomination.
func (n *Nominator) DeleteNominatedPodIfExists(pod *v1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delete(pod)
}

func (n *Nominator) delete(pod *v1.Pod) {
	nodeName, ok := n.nominatedPodToNode[pod.UID]
	if !ok {
		return
	}
	delete(n.nominatedPodToNode, pod.UID)
	pods := slices.DeleteFunc(n.nominatedPods[nodeName], func(pi *framework.PodInfo) bool { return pi.Pod.UID == pod.UID })
	if len(pods) == 0 {
		delete(n.nominatedPods, nodeName)
	} else {
		n.nominatedPods[nodeName] = pods
	}
}

// NominatedPodsForNode returns a copy of the list of pods nominated to nodeName.
func (n *Nominator) NominatedPodsForNode(nodeName string) []*framework.PodInfo {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Clone(n.nominatedPods[nodeName])
}
