// Package nodeaffinity holds the NodeAffinity plugin: a Filter for
// spec.nodeSelector and required node affinity, and a Score for preferred
// node affinity.
package nodeaffinity

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
)

// ErrReasonPod is the reason given for a node the pod's selector or
// required affinity does not match.
const ErrReasonPod = "node(s) didn't match Pod's node affinity/selector"

const (
	preFilterStateKey framework.StateKey = "PreFilter" + names.NodeAffinity
	preScoreStateKey  framework.StateKey = "PreScore" + names.NodeAffinity
)

// NodeAffinity decides whether the node's labels (and name) satisfy the
// pod's spec.nodeSelector and
// affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
// (Filter), and prefers nodes matching the weighted
// preferredDuringSchedulingIgnoredDuringExecution terms (Score). Mirrors
// kube-scheduler's nodeaffinity plugin with the matching semantics of
// k8s.io/component-helpers/scheduling/corev1/nodeaffinity.
type NodeAffinity struct{}

var (
	_ framework.PreFilterPlugin = (*NodeAffinity)(nil)
	_ framework.FilterPlugin    = (*NodeAffinity)(nil)
	_ framework.PreScorePlugin  = (*NodeAffinity)(nil)
	_ framework.ScorePlugin     = (*NodeAffinity)(nil)
	_ framework.ScoreExtensions = (*NodeAffinity)(nil)
)

// New builds the plugin.
func New(context.Context, framework.Handle) (framework.Plugin, error) {
	return &NodeAffinity{}, nil
}

// Name returns "NodeAffinity".
func (*NodeAffinity) Name() string { return names.NodeAffinity }

// RequiredNodeAffinity is a pod's hard node constraints compiled once per
// cycle: the nodeSelector map and the required node selector terms (ORed).
// Mirrors component-helpers' nodeaffinity.RequiredNodeAffinity.
type RequiredNodeAffinity struct {
	labelSelector labels.Selector // nil: no spec.nodeSelector
	terms         []nodeSelectorTerm
	hasAffinity   bool // required affinity present (then some term must match)
}

// GetRequiredNodeAffinity compiles pod's nodeSelector and required node
// affinity.
func GetRequiredNodeAffinity(pod *v1.Pod) RequiredNodeAffinity {
	var r RequiredNodeAffinity
	if len(pod.Spec.NodeSelector) > 0 {
		r.labelSelector = labels.SelectorFromSet(pod.Spec.NodeSelector)
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		r.hasAffinity = true
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			r.terms = append(r.terms, compileTerm(t))
		}
	}
	return r
}

// Match reports whether node satisfies the nodeSelector and at least one
// required term.
func (r RequiredNodeAffinity) Match(node *v1.Node) bool {
	if r.labelSelector != nil && !r.labelSelector.Matches(labels.Set(node.Labels)) {
		return false
	}
	if !r.hasAffinity {
		return true
	}
	for _, t := range r.terms {
		if t.match(node) {
			return true
		}
	}
	return false
}

// Clone returns r itself: it is never mutated after compilation.
func (r RequiredNodeAffinity) Clone() framework.StateData { return r }

// PreFilter compiles the pod's node constraints for the Filter calls.
func (pl *NodeAffinity) PreFilter(_ context.Context, state *framework.CycleState, pod *v1.Pod) *framework.Status {
	state.Write(preFilterStateKey, GetRequiredNodeAffinity(pod))
	return nil
}

// Filter rejects a node the pod's nodeSelector or required affinity does not
// match, with UnschedulableAndUnresolvable: only relabelling the node helps.
func (pl *NodeAffinity) Filter(_ context.Context, state *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	node := nodeInfo.Node()
	if node == nil {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, "node not found")
	}
	r, ok := readState[RequiredNodeAffinity](state, preFilterStateKey)
	if !ok {
		r = GetRequiredNodeAffinity(pod)
	}
	if !r.Match(node) {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonPod)
	}
	return nil
}

type preferredTerm struct {
	weight int64
	term   nodeSelectorTerm
}

type preScoreState []preferredTerm

func (s preScoreState) Clone() framework.StateData { return s }

// PreScore compiles the pod's preferred node affinity terms.
func (pl *NodeAffinity) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*framework.NodeInfo) *framework.Status {
	var s preScoreState
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if p.Weight != 0 {
				s = append(s, preferredTerm{weight: int64(p.Weight), term: compileTerm(p.Preference)})
			}
		}
	}
	state.Write(preScoreStateKey, s)
	return nil
}

// Score sums the weights of the preferred terms the node matches.
func (pl *NodeAffinity) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeInfo *framework.NodeInfo) (int64, *framework.Status) {
	s, ok := readState[preScoreState](state, preScoreStateKey)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("reading %q from cycle state: %w", preScoreStateKey, framework.ErrNotFound))
	}
	var score int64
	for _, p := range s {
		if p.term.match(nodeInfo.Node()) {
			score += p.weight
		}
	}
	return score, nil
}

// ScoreExtensions returns the plugin itself: weight sums need normalizing.
func (pl *NodeAffinity) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore scales the sums so the best node scores MaxNodeScore.
func (pl *NodeAffinity) NormalizeScore(_ context.Context, _ *framework.CycleState, _ *v1.Pod, scores framework.NodeScoreList) *framework.Status {
	var maxScore int64
	for _, s := range scores {
		maxScore = max(maxScore, s.Score)
	}
	if maxScore == 0 {
		return nil
	}
	for i := range scores {
		scores[i].Score = framework.MaxNodeScore * scores[i].Score / maxScore
	}
	return nil
}

func readState[T framework.StateData](state *framework.CycleState, key framework.StateKey) (T, bool) {
	var zero T
	d, err := state.Read(key)
	if err != nil {
		return zero, false
	}
	t, ok := d.(T)
	return t, ok
}

// nodeSelectorTerm is one compiled NodeSelectorTerm: its matchExpressions
// (on labels) and matchFields (on metadata.name), ANDed. A term that is empty
// or does not parse matches no node, as in component-helpers.
type nodeSelectorTerm struct {
	labels labels.Selector
	fields []fieldRequirement
	valid  bool
}

type fieldRequirement struct {
	in    bool // In; otherwise NotIn
	value string
}

func compileTerm(t v1.NodeSelectorTerm) nodeSelectorTerm {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return nodeSelectorTerm{}
	}
	sel := labels.Everything()
	if len(t.MatchExpressions) > 0 {
		var err error
		if sel, err = labelSelectorFromRequirements(t.MatchExpressions); err != nil {
			return nodeSelectorTerm{}
		}
	}
	var fields []fieldRequirement
	for _, f := range t.MatchFields {
		// Only metadata.name is a supported node field, with In/NotIn of
		// exactly one value (apiserver validation enforces the same).
		if f.Key != "metadata.name" || len(f.Values) != 1 {
			return nodeSelectorTerm{}
		}
		switch f.Operator {
		case v1.NodeSelectorOpIn:
			fields = append(fields, fieldRequirement{in: true, value: f.Values[0]})
		case v1.NodeSelectorOpNotIn:
			fields = append(fields, fieldRequirement{in: false, value: f.Values[0]})
		default:
			return nodeSelectorTerm{}
		}
	}
	return nodeSelectorTerm{labels: sel, fields: fields, valid: true}
}

func (t nodeSelectorTerm) match(node *v1.Node) bool {
	if !t.valid || !t.labels.Matches(labels.Set(node.Labels)) {
		return false
	}
	for _, f := range t.fields {
		if (node.Name == f.value) != f.in {
			return false
		}
	}
	return true
}

func labelSelectorFromRequirements(reqs []v1.NodeSelectorRequirement) (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, expr := range reqs {
		var op selection.Operator
		switch expr.Operator {
		case v1.NodeSelectorOpIn:
			op = selection.In
		case v1.NodeSelectorOpNotIn:
			op = selection.NotIn
		case v1.NodeSelectorOpExists:
			op = selection.Exists
		case v1.NodeSelectorOpDoesNotExist:
			op = selection.DoesNotExist
		case v1.NodeSelectorOpGt:
			op = selection.GreaterThan
		case v1.NodeSelectorOpLt:
			op = selection.LessThan
		default:
			return nil, fmt.Errorf("%q is not a valid node selector operator", expr.Operator)
		}
		r, err := labels.NewRequirement(expr.Key, op, expr.Values)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	return sel, nil
}
