// Package tainttoleration holds the TaintToleration plugin: a Filter for
// NoSchedule/NoExecute taints and a Score for PreferNoSchedule taints.
package tainttoleration

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// ErrReasonNotMatch formats the reason for an untolerated taint; the taint's
// key and value fill it, as in "node(s) had untolerated taint {dedicated: gpu}".
const ErrReasonNotMatch = "node(s) had untolerated taint {%s: %s}"

const preScoreStateKey framework.StateKey = "PreScore" + names.TaintToleration

// TaintToleration decides whether the pod tolerates the node's taints: a
// NoSchedule or NoExecute taint the pod does not tolerate keeps it off the
// node (Filter); each untolerated PreferNoSchedule taint only lowers the
// node's score (Score). Mirrors kube-scheduler's tainttoleration plugin.
type TaintToleration struct {
	handle framework.Handle
}

var (
	_ framework.FilterPlugin    = (*TaintToleration)(nil)
	_ framework.PreScorePlugin  = (*TaintToleration)(nil)
	_ framework.ScorePlugin     = (*TaintToleration)(nil)
	_ framework.ScoreExtensions = (*TaintToleration)(nil)
)

// New builds the plugin.
func New(_ context.Context, h framework.Handle) (framework.Plugin, error) {
	return &TaintToleration{handle: h}, nil
}

// Name returns "TaintToleration".
func (*TaintToleration) Name() string { return names.TaintToleration }

// Filter rejects the node, naming the first NoSchedule or NoExecute taint
// the pod does not tolerate, with UnschedulableAndUnresolvable: only a change
// to the node's taints helps. PreferNoSchedule taints never reject.
func (pl *TaintToleration) Filter(_ context.Context, _ *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	node := nodeInfo.Node()
	if node == nil {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, "node not found")
	}
	taint, untolerated := FindMatchingUntoleratedTaint(pl.handle.Logger(), node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	})
	if !untolerated {
		return nil
	}
	return framework.NewStatus(framework.UnschedulableAndUnresolvable, fmt.Sprintf(ErrReasonNotMatch, taint.Key, taint.Value))
}

type preScoreState struct {
	tolerationsPreferNoSchedule []v1.Toleration
}

func (s *preScoreState) Clone() framework.StateData { return s }

// PreScore keeps the pod's tolerations that can apply to PreferNoSchedule
// taints (those with that effect or no effect).
func (pl *TaintToleration) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*framework.NodeInfo) *framework.Status {
	s := &preScoreState{}
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == v1.TaintEffectPreferNoSchedule {
			s.tolerationsPreferNoSchedule = append(s.tolerationsPreferNoSchedule, t)
		}
	}
	state.Write(preScoreStateKey, s)
	return nil
}

// Score counts the node's PreferNoSchedule taints the pod does not tolerate;
// NormalizeScore turns the count around so that fewer is better.
func (pl *TaintToleration) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeInfo *framework.NodeInfo) (int64, *framework.Status) {
	d, err := state.Read(preScoreStateKey)
	if err != nil {
		return 0, framework.AsStatus(err)
	}
	s, ok := d.(*preScoreState)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("%q has type %T", preScoreStateKey, d))
	}
	var count int64
	for i := range nodeInfo.Node().Spec.Taints {
		taint := &nodeInfo.Node().Spec.Taints[i]
		if taint.Effect == v1.TaintEffectPreferNoSchedule && !TolerationsTolerateTaint(pl.handle.Logger(), s.tolerationsPreferNoSchedule, taint) {
			count++
		}
	}
	return count, nil
}

// ScoreExtensions returns the plugin itself: its counts need normalizing.
func (pl *TaintToleration) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore maps counts onto [0, MaxNodeScore] reversed: the node with
// the most untolerated PreferNoSchedule taints scores 0, nodes with none
// score MaxNodeScore. Mirrors kube-scheduler's helper.DefaultNormalizeScore
// with reverse=true.
func (pl *TaintToleration) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *v1.Pod, scores framework.NodeScoreList) *framework.Status {
	var maxCount int64
	for _, s := range scores {
		maxCount = max(maxCount, s.Score)
	}
	for i := range scores {
		if maxCount == 0 {
			scores[i].Score = framework.MaxNodeScore
			continue
		}
		scores[i].Score = framework.MaxNodeScore - framework.MaxNodeScore*scores[i].Score/maxCount
	}
	return nil
}

// TolerationsTolerateTaint reports whether any of tolerations tolerates
// taint, by k8s.io/api's Toleration.ToleratesTaint: effects must match (an
// empty toleration effect matches all), keys must match (an empty key with
// operator Exists matches every taint), and Equal compares values while
// Exists ignores them. Mirrors component-helpers' TolerationsTolerateTaint.
func TolerationsTolerateTaint(logger *slog.Logger, tolerations []v1.Toleration, taint *v1.Taint) bool {
	klogger := logr.FromSlogHandler(logger.Handler())
	for i := range tolerations {
		// Gt/Lt tolerations are an alpha Kubernetes feature; skiff leaves
		// it off, so they never match.
		if tolerations[i].ToleratesTaint(klogger, taint, false) {
			return true
		}
	}
	return false
}

// FindMatchingUntoleratedTaint returns the first taint that inclusion
// selects and tolerations do not tolerate. Mirrors component-helpers'
// FindMatchingUntoleratedTaint.
func FindMatchingUntoleratedTaint(logger *slog.Logger, taints []v1.Taint, tolerations []v1.Toleration, inclusion func(*v1.Taint) bool) (v1.Taint, bool) {
	for i := range taints {
		if !inclusion(&taints[i]) {
			continue
		}
		if !TolerationsTolerateTaint(logger, tolerations, &taints[i]) {
			return taints[i], true
		}
	}
	return v1.Taint{}, false
}
