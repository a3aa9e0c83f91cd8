package framework

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// NodeInfo is the scheduler's view of one node: the Node object, the pods on
// it (bound, or assumed by this scheduler), and the resources those pods
// request against the node's allocatable. Filters and scorers read it; only
// the cache writes it. Mirrors kube-scheduler's framework.NodeInfo.
type NodeInfo struct {
	node *v1.Node
	// Pods are the non-terminal pods on the node, assumed ones included.
	Pods []*PodInfo
	// Requested is the sum of the pods' requests.
	Requested Resource
	// NonZeroRequested is the sum with scoring defaults for empty requests.
	NonZeroRequested Resource
	// Allocatable is node.status.allocatable (capacity if unset).
	Allocatable Resource
	// Generation changes on every mutation; snapshots reuse unchanged nodes.
	Generation int64
}

// NewNodeInfo returns a NodeInfo holding pods and no node yet.
func NewNodeInfo(pods ...*v1.Pod) *NodeInfo {
	ni := &NodeInfo{}
	for _, p := range pods {
		ni.AddPod(p)
	}
	return ni
}

// Node returns the node, or nil if only pods referring to it are known so
// far (or it was deleted while pods still point at it).
func (n *NodeInfo) Node() *v1.Node {
	if n == nil {
		return nil
	}
	return n.node
}

// SetNode sets the node and reads its allocatable. An unset allocatable
// falls back to capacity, as the apiserver's SetDefaults_NodeStatus does.
func (n *NodeInfo) SetNode(node *v1.Node) {
	n.node = node
	alloc := node.Status.Allocatable
	if alloc == nil {
		alloc = node.Status.Capacity
	}
	n.Allocatable = NewResource(alloc)
}

// RemoveNode forgets the node but keeps its pods, so that their resources
// are still accounted if the node comes back before they are deleted.
func (n *NodeInfo) RemoveNode() {
	n.node = nil
}

// AddPod adds pod and its requests to the node.
func (n *NodeInfo) AddPod(pod *v1.Pod) {
	n.AddPodInfo(NewPodInfo(pod))
}

// AddPodInfo adds an already computed PodInfo to the node.
func (n *NodeInfo) AddPodInfo(pi *PodInfo) {
	n.Pods = append(n.Pods, pi)
	n.Requested.AddResource(pi.Requests)
	n.NonZeroRequested.AddResource(pi.NonZeroRequests)
}

// RemovePod removes the pod with pod's UID and its requests from the node;
// it is an error if the pod is not there.
func (n *NodeInfo) RemovePod(pod *v1.Pod) error {
	for i, pi := range n.Pods {
		if pi.Pod.UID != pod.UID {
			continue
		}
		n.Requested.SubResource(pi.Requests)
		n.NonZeroRequested.SubResource(pi.NonZeroRequests)
		n.Pods[i] = n.Pods[len(n.Pods)-1]
		n.Pods[len(n.Pods)-1] = nil
		n.Pods = n.Pods[:len(n.Pods)-1]
		return nil
	}
	return fmt.Errorf("no pod %s/%s (uid %s) on node %q", pod.Namespace, pod.Name, pod.UID, n.nodeName())
}

// Clone returns a copy that can be read while the original keeps changing.
// Pods are shared: the cache replaces pod objects, it never mutates them.
func (n *NodeInfo) Clone() *NodeInfo {
	c := *n
	c.Pods = append([]*PodInfo(nil), n.Pods...)
	c.Requested, c.NonZeroRequested, c.Allocatable = n.Requested.Clone(), n.NonZeroRequested.Clone(), n.Allocatable.Clone()
	return &c
}

func (n *NodeInfo) nodeName() string {
	if n.node == nil {
		return ""
	}
	return n.node.Name
}
