package noderesources

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

const preScoreStateKey framework.StateKey = "PreScore" + names.NodeResourcesLeastAllocated

// LeastAllocated prefers the node that would have the most cpu and memory
// left after placing the pod, which spreads load across nodes. Each
// resource scores (allocatable - requested) * MaxNodeScore / allocatable,
// requested including the pod, with request-less containers counted at the
// scoring defaults; the node score is the mean over cpu and memory (weight 1
// each), so 0..100. Mirrors kube-scheduler's NodeResourcesLeastAllocated
// (today the LeastAllocated scoring strategy of NodeResourcesFit).
type LeastAllocated struct{}

var (
	_ framework.PreScorePlugin = (*LeastAllocated)(nil)
	_ framework.ScorePlugin    = (*LeastAllocated)(nil)
)

// NewLeastAllocated builds the plugin.
func NewLeastAllocated(context.Context, framework.Handle) (framework.Plugin, error) {
	return &LeastAllocated{}, nil
}

// Name returns "NodeResourcesLeastAllocated".
func (*LeastAllocated) Name() string { return names.NodeResourcesLeastAllocated }

type preScoreState struct {
	framework.Resource
}

func (s *preScoreState) Clone() framework.StateData { return s }

// PreScore computes the pod's non-zero requests once for all Score calls.
func (l *LeastAllocated) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*framework.NodeInfo) *framework.Status {
	state.Write(preScoreStateKey, &preScoreState{framework.PodRequests(pod, true)})
	return nil
}

// Score returns the node's least-allocated score in [0, MaxNodeScore].
func (l *LeastAllocated) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeInfo *framework.NodeInfo) (int64, *framework.Status) {
	d, err := state.Read(preScoreStateKey)
	if err != nil {
		return 0, framework.AsStatus(err)
	}
	s, ok := d.(*preScoreState)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("%q has type %T", preScoreStateKey, d))
	}
	return LeastAllocatedScore(s.Resource, nodeInfo), nil
}

// ScoreExtensions returns nil: scores are already in range.
func (l *LeastAllocated) ScoreExtensions() framework.ScoreExtensions { return nil }

// LeastAllocatedScore is the score of placing a pod with non-zero requests
// podRequest on nodeInfo. A resource the node has none of is left out of
// the mean, as kube-scheduler's leastResourceScorer does.
func LeastAllocatedScore(podRequest framework.Resource, nodeInfo *framework.NodeInfo) int64 {
	type res struct{ requested, allocatable int64 }
	var score, weightSum int64
	for _, r := range []res{
		{nodeInfo.NonZeroRequested.MilliCPU + podRequest.MilliCPU, nodeInfo.Allocatable.MilliCPU},
		{nodeInfo.NonZeroRequested.Memory + podRequest.Memory, nodeInfo.Allocatable.Memory},
	} {
		if r.allocatable == 0 {
			continue
		}
		score += leastRequestedScore(r.requested, r.allocatable)
		weightSum++
	}
	if weightSum == 0 {
		return 0
	}
	return score / weightSum
}

// leastRequestedScore is (capacity - requested) * MaxNodeScore / capacity,
// 0 when the resource is overcommitted.
func leastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * framework.MaxNodeScore / capacity
}
