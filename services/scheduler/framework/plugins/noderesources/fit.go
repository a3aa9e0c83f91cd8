// Package noderesources holds NodeResourcesFit: a Filter on requests against
// allocatable, and a Score under a scoring strategy (LeastAllocated, which
// spreads pods towards the emptier nodes).
package noderesources

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// Reasons NodeResourcesFit gives, as kube-scheduler words them.
const (
	ReasonTooManyPods        = "Too many pods"
	ReasonInsufficientCPU    = "Insufficient cpu"
	ReasonInsufficientMemory = "Insufficient memory"
)

const preFilterStateKey framework.StateKey = "PreFilter" + names.NodeResourcesFit

// Fit decides whether the node has room for the pod: one more pod within
// allocatable pods, and the pod's cpu, memory and scalar (extended) requests within allocatable
// minus what the node's pods (assumed ones included) already request. All
// shortfalls are reported, each as its own reason. Mirrors kube-scheduler's
// noderesources.Fit (without ephemeral storage).
// It also scores nodes under ScoringStrategy (score.go).
type Fit struct {
	ScoringStrategy ScoringStrategy
}

var (
	_ framework.PreFilterPlugin = (*Fit)(nil)
	_ framework.FilterPlugin    = (*Fit)(nil)
)

// NewFit builds the plugin with kube-scheduler's default scoring strategy,
// LeastAllocated.
func NewFit(context.Context, framework.Handle) (framework.Plugin, error) {
	return &Fit{ScoringStrategy: ScoringStrategy{Type: LeastAllocated}}, nil
}

// Name returns "NodeResourcesFit".
func (*Fit) Name() string { return names.NodeResourcesFit }

type preFilterState struct {
	framework.Resource
}

func (s *preFilterState) Clone() framework.StateData { return s }

// PreFilter computes the pod's requests once for all Filter calls.
func (f *Fit) PreFilter(_ context.Context, state *framework.CycleState, pod *v1.Pod) *framework.Status {
	state.Write(preFilterStateKey, &preFilterState{framework.PodRequests(pod, false)})
	return nil
}

// Filter rejects the node with Unschedulable (other pods leaving could make
// room) and one reason per insufficient resource.
func (f *Fit) Filter(_ context.Context, state *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	d, err := state.Read(preFilterStateKey)
	if err != nil {
		return framework.AsStatus(err)
	}
	s, ok := d.(*preFilterState)
	if !ok {
		return framework.AsStatus(fmt.Errorf("%q has type %T", preFilterStateKey, d))
	}
	if reasons := InsufficientResources(s.Resource, nodeInfo); len(reasons) > 0 {
		return framework.NewStatus(framework.Unschedulable, reasons...)
	}
	return nil
}

// InsufficientResources lists, in kube-scheduler's order (pods, cpu,
// memory, then each scalar resource), what the node lacks for a pod requesting podRequest. A resource
// the pod does not request is never insufficient, even on an overcommitted
// node. Mirrors kube-scheduler's fitsRequest.
func InsufficientResources(podRequest framework.Resource, nodeInfo *framework.NodeInfo) []string {
	var reasons []string
	if int64(len(nodeInfo.Pods))+1 > nodeInfo.Allocatable.AllowedPodNumber {
		reasons = append(reasons, ReasonTooManyPods)
	}
	if podRequest.IsZero() {
		return reasons
	}
	if podRequest.MilliCPU > 0 && podRequest.MilliCPU > nodeInfo.Allocatable.MilliCPU-nodeInfo.Requested.MilliCPU {
		reasons = append(reasons, ReasonInsufficientCPU)
	}
	if podRequest.Memory > 0 && podRequest.Memory > nodeInfo.Allocatable.Memory-nodeInfo.Requested.Memory {
		reasons = append(reasons, ReasonInsufficientMemory)
	}
	for _, name := range slices.Sorted(maps.Keys(podRequest.ScalarResources)) {
		if q := podRequest.ScalarResources[name]; q > 0 && q > nodeInfo.Allocatable.ScalarResources[name]-nodeInfo.Requested.ScalarResources[name] {
			reasons = append(reasons, "Insufficient "+string(name))
		}
	}
	return reasons
}
