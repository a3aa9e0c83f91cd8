package noderesources

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

const preScoreStateKey framework.StateKey = "PreScore" + names.NodeResourcesFit

// ScoringStrategyType names how NodeResourcesFit scores a node. Mirrors
// kube-scheduler's config.ScoringStrategyType.
type ScoringStrategyType string

// LeastAllocated prefers the node that would have the most cpu and memory
// left after placing the pod, which spreads load across nodes; it is
// kube-scheduler's default strategy (and the retired plugin
// NodeResourcesLeastAllocated of kube before 1.23). It is the only strategy
// skiff implements.
const LeastAllocated ScoringStrategyType = "LeastAllocated"

// ScoringStrategy configures NodeResourcesFit's Score. Mirrors
// kube-scheduler's config.ScoringStrategy (Type only: cpu and memory weigh
// 1 each, as in kube's defaults).
type ScoringStrategy struct {
	Type ScoringStrategyType
}

var (
	_ framework.PreScorePlugin = (*Fit)(nil)
	_ framework.ScorePlugin    = (*Fit)(nil)
)

type preScoreState struct {
	framework.Resource
}

func (s *preScoreState) Clone() framework.StateData { return s }

// PreScore computes the pod's non-zero requests once for all Score calls.
func (f *Fit) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*framework.NodeInfo) *framework.Status {
	state.Write(preScoreStateKey, &preScoreState{framework.PodRequests(pod, true)})
	return nil
}

// Score returns the node's score in [0, MaxNodeScore] under f's scoring
// strategy; an unknown strategy is an Error status.
func (f *Fit) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeInfo *framework.NodeInfo) (int64, *framework.Status) {
	d, err := state.Read(preScoreStateKey)
	if err != nil {
		return 0, framework.AsStatus(err)
	}
	s, ok := d.(*preScoreState)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("%q has type %T", preScoreStateKey, d))
	}
	switch f.ScoringStrategy.Type {
	case LeastAllocated:
		return LeastAllocatedScore(s.Resource, nodeInfo), nil
	default:
		return 0, framework.AsStatus(fmt.Errorf("%s: scoring strategy %q is not supported", names.NodeResourcesFit, f.ScoringStrategy.Type))
	}
}

// ScoreExtensions returns nil: scores are already in range.
func (f *Fit) ScoreExtensions() framework.ScoreExtensions { return nil }

// LeastAllocatedScore is the LeastAllocated score of placing a pod with
// non-zero requests podRequest on nodeInfo: each resource scores
// (allocatable - requested) * MaxNodeScore / allocatable, requested
// including the pod, and the node score is the mean over cpu and memory, so
// 0..100. A resource the node has none of is left out of
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
