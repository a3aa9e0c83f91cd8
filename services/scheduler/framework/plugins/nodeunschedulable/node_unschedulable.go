// Package nodeunschedulable holds the Filter plugin NodeUnschedulable.
package nodeunschedulable

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
	"skiff.dev/services/scheduler/framework/plugins/tainttoleration"
)

// ErrReasonUnschedulable is the reason given for a cordoned node.
const ErrReasonUnschedulable = "node(s) were unschedulable"

// NodeUnschedulable decides whether a cordoned node (spec.unschedulable, set
// by `kubectl cordon`) may take the pod: only if the pod tolerates the
// node.kubernetes.io/unschedulable:NoSchedule taint, as DaemonSet pods do.
// Mirrors kube-scheduler's nodeunschedulable plugin.
type NodeUnschedulable struct {
	handle framework.Handle
}

var _ framework.FilterPlugin = (*NodeUnschedulable)(nil)

// New builds the plugin.
func New(_ context.Context, h framework.Handle) (framework.Plugin, error) {
	return &NodeUnschedulable{handle: h}, nil
}

// Name returns "NodeUnschedulable".
func (*NodeUnschedulable) Name() string { return names.NodeUnschedulable }

// Filter rejects a cordoned node unless the pod tolerates the cordon, with
// UnschedulableAndUnresolvable: only uncordoning the node helps.
func (pl *NodeUnschedulable) Filter(_ context.Context, _ *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	node := nodeInfo.Node()
	if node == nil {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, "node not found")
	}
	if !node.Spec.Unschedulable {
		return nil
	}
	cordon := &v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}
	if tainttoleration.TolerationsTolerateTaint(pl.handle.Logger(), pod.Spec.Tolerations, cordon) {
		return nil
	}
	return framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonUnschedulable)
}
