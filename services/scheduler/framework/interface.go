// Package framework defines the scheduling framework: the extension points a
// scheduling cycle passes through (QueueSort, PreFilter, Filter, PostFilter,
// PreScore, Score, Reserve, Bind), the plugin interfaces for each, and the Status a
// plugin returns to say whether, and why, a pod can go on a node.
//
// It mirrors kube-scheduler's pkg/scheduler/framework/interface.go; names and
// semantics are Kubernetes' so a reader who knows kube-scheduler finds each
// idea where they expect it.
package framework

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/record"
)

// Code is the outcome class of a plugin run. It decides what the scheduler
// does next: Success continues, the two Unschedulable codes reject the node
// (and, after all nodes, park the pod until the cluster changes), Error
// aborts the cycle and retries the pod with backoff. Mirrors kube-scheduler's
// framework.Code.
type Code int

// The codes a Status can carry, in kube-scheduler's order.
const (
	// Success means the plugin ran and the pod may proceed.
	Success Code = iota
	// Error is an internal failure (bad input, API error); the pod is retried
	// with backoff rather than parked as unschedulable.
	Error
	// Unschedulable means the pod does not fit the node now, but might after
	// other pods go away (preemption could help in kube-scheduler).
	Unschedulable
	// UnschedulableAndUnresolvable means the pod can never fit the node as it
	// is (labels, taints, cordon): only a change to the node itself helps.
	UnschedulableAndUnresolvable
)

var codeNames = [...]string{"Success", "Error", "Unschedulable", "UnschedulableAndUnresolvable"}

// String returns the code's Kubernetes name, e.g. "Unschedulable".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Unknown"
}

// Status is a plugin's verdict: a Code, the human reasons behind it (these
// reach the user in "0/3 nodes are available: ..."), an optional error, and
// the plugin that produced it. A nil *Status means Success. Mirrors
// kube-scheduler's framework.Status.
type Status struct {
	code    Code
	reasons []string
	err     error
	plugin  string
}

// NewStatus returns a Status with the given code and reasons.
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps err in a Status with code Error; a nil err gives nil (Success).
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, err: err}
}

// Code returns the status code; a nil Status is Success.
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// Reasons returns the reasons, with the wrapped error's text first if any.
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	if s.err != nil {
		return append([]string{s.err.Error()}, s.reasons...)
	}
	return s.reasons
}

// Message joins the reasons with ", ", as kube-scheduler prints them.
func (s *Status) Message() string {
	return strings.Join(s.Reasons(), ", ")
}

// IsSuccess reports whether the status is nil or has code Success.
func (s *Status) IsSuccess() bool {
	return s.Code() == Success
}

// IsRejected reports whether the pod was rejected as unschedulable (either
// Unschedulable code) rather than failing with an Error.
func (s *Status) IsRejected() bool {
	c := s.Code()
	return c == Unschedulable || c == UnschedulableAndUnresolvable
}

// AsError returns nil for success, the wrapped error if there is one, and
// otherwise an error carrying the message.
func (s *Status) AsError() error {
	if s.IsSuccess() {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	return errors.New(s.Message())
}

// WithError sets the wrapped error and returns s, for chaining. On a nil
// (Success) status it cannot record the error in place: a nil err keeps
// Success (nil), any other err gives a new Status with code Error, as
// AsStatus does, so an error is never silently dropped.
func (s *Status) WithError(err error) *Status {
	if s == nil {
		return AsStatus(err)
	}
	s.err = err
	return s
}

// WithPlugin records which plugin produced the status and returns s. A nil
// (Success) status stays nil: success names no plugin, as in kube-scheduler
// where only a failing plugin is recorded on the status.
func (s *Status) WithPlugin(plugin string) *Status {
	if s == nil {
		return nil
	}
	s.plugin = plugin
	return s
}

// Plugin returns the name of the plugin that produced the status, if known.
func (s *Status) Plugin() string {
	if s == nil {
		return ""
	}
	return s.plugin
}

// Plugin is the parent of every plugin interface: a plugin is named, and the
// name appears in statuses, metrics and logs.
type Plugin interface {
	Name() string
}

// LessFunc orders two queued pods: true if podInfo1 should be scheduled first.
type LessFunc func(podInfo1, podInfo2 *QueuedPodInfo) bool

// QueueSortPlugin decides the order in which pending pods are tried. Only one
// may be enabled. Mirrors kube-scheduler's QueueSortPlugin.
type QueueSortPlugin interface {
	Plugin
	Less(podInfo1, podInfo2 *QueuedPodInfo) bool
}

// PreFilterPlugin runs once per scheduling cycle before any Filter, to
// compute per-pod state (written to the CycleState) or reject the pod
// outright. Mirrors kube-scheduler's PreFilterPlugin.
type PreFilterPlugin interface {
	Plugin
	PreFilter(ctx context.Context, state *CycleState, pod *v1.Pod) *Status
}

// FilterPlugin answers one question for one node: can the pod run here?
// A non-success status must carry the reason the user will read. Mirrors
// kube-scheduler's FilterPlugin.
type FilterPlugin interface {
	Plugin
	Filter(ctx context.Context, state *CycleState, pod *v1.Pod, nodeInfo *NodeInfo) *Status
}

// PreScorePlugin runs once per cycle over the feasible nodes before Score, to
// prepare state shared by every Score call. Mirrors kube-scheduler's
// PreScorePlugin.
type PreScorePlugin interface {
	Plugin
	PreScore(ctx context.Context, state *CycleState, pod *v1.Pod, nodes []*NodeInfo) *Status
}

// ScorePlugin ranks a feasible node for the pod, from MinNodeScore to
// MaxNodeScore unless it normalizes through ScoreExtensions. Mirrors
// kube-scheduler's ScorePlugin.
type ScorePlugin interface {
	Plugin
	Score(ctx context.Context, state *CycleState, pod *v1.Pod, nodeInfo *NodeInfo) (int64, *Status)
	// ScoreExtensions returns the normalizer, or nil if scores are already
	// in [MinNodeScore, MaxNodeScore].
	ScoreExtensions() ScoreExtensions
}

// ScoreExtensions rescales a plugin's raw scores for all nodes into
// [MinNodeScore, MaxNodeScore] after every node was scored.
type ScoreExtensions interface {
	NormalizeScore(ctx context.Context, state *CycleState, pod *v1.Pod, scores NodeScoreList) *Status
}

// ReservePlugin is told when a pod is assumed on a node (Reserve) and when
// that assumption is undone (Unreserve), so plugins with their own
// bookkeeping stay in step with the cache. Mirrors kube-scheduler's
// ReservePlugin.
type ReservePlugin interface {
	Plugin
	Reserve(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
	Unreserve(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string)
}

// PreBindPlugin runs in the binding cycle, before the pod is bound, to make the
// node ready for it (VolumeBinding binds or provisions the pod's volumes and waits
// for them). A failure unreserves the pod and retries it. Mirrors kube-scheduler's
// PreBindPlugin.
type PreBindPlugin interface {
	Plugin
	PreBind(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
}

// BindPlugin writes the scheduling decision to the apiserver. The first
// enabled Bind plugin binds. Mirrors kube-scheduler's BindPlugin.
type BindPlugin interface {
	Plugin
	Bind(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
}

// PostFilterResult is what a PostFilter plugin achieved: the node the pod is
// nominated to once the pods preempted for it are gone.
type PostFilterResult struct {
	NominatedNodeName string
}

// PostFilterPlugin runs when no node passed the filters, to make one pass
// (preemption). It gets each node's filter status; a Success status with a
// nominated node means room is being made there. Mirrors kube-scheduler's
// PostFilterPlugin.
type PostFilterPlugin interface {
	Plugin
	PostFilter(ctx context.Context, state *CycleState, pod *v1.Pod, filteredNodeStatusMap NodeToStatusMap) (*PostFilterResult, *Status)
}

// NodeInfoLister reads the scheduling cycle's snapshot of the nodes. Mirrors
// kube-scheduler's framework.NodeInfoLister.
type NodeInfoLister interface {
	// List returns every node's NodeInfo.
	List() []*NodeInfo
	// Get returns the named node's NodeInfo, nil if there is none.
	Get(nodeName string) *NodeInfo
}

// PodNominator keeps the pods nominated to nodes by preemption, so that other
// pods of no higher priority leave them the room being made. Mirrors
// kube-scheduler's framework.PodNominator.
type PodNominator interface {
	// AddNominatedPod nominates pi's pod to nodeName, or to its
	// status.nominatedNodeName when nodeName is "".
	AddNominatedPod(pi *PodInfo, nodeName string)
	// DeleteNominatedPodIfExists forgets the pod's nomination.
	DeleteNominatedPodIfExists(pod *v1.Pod)
	// NominatedPodsForNode returns the pods nominated to nodeName.
	NominatedPodsForNode(nodeName string) []*PodInfo
}

// Handle is what the framework lends to plugins: the API client, a logger,
// the cycle's snapshot, the nominated pods and the filters. Mirrors
// kube-scheduler's framework.Handle (reduced).
type Handle interface {
	// ClientSet is the clientset to the apiserver.
	ClientSet() kubernetes.Interface
	// Logger is the scheduler's structured logger.
	Logger() *slog.Logger
	// EventRecorder records events on the scheduler's behalf.
	EventRecorder() record.EventRecorder
	// SnapshotSharedLister reads the current scheduling cycle's snapshot.
	SnapshotSharedLister() NodeInfoLister
	// PodNominator holds the nominated pods.
	PodNominator() PodNominator
	// PDBLister reads the PodDisruptionBudgets; nil when the scheduler has none.
	PDBLister() policylisters.PodDisruptionBudgetLister
	// SharedInformerFactory is the scheduler's informer factory for what plugins read
	// beyond pods and nodes (PersistentVolumeClaims, PersistentVolumes,
	// StorageClasses); the scheduler starts it and waits for its caches before
	// scheduling. Nil when the scheduler has none.
	SharedInformerFactory() informers.SharedInformerFactory
	// RunFilterPluginsWithNominatedPods runs the filters on nodeInfo with the
	// pods nominated to it of at least pod's priority counted as already
	// there (and, when there are any, once more without them: both must pass).
	RunFilterPluginsWithNominatedPods(ctx context.Context, state *CycleState, pod *v1.Pod, nodeInfo *NodeInfo) *Status
}

// Framework runs the enabled plugins of one scheduling profile at each
// extension point. Mirrors kube-scheduler's framework.Framework.
type Framework interface {
	Handle
	// ProfileName is the schedulerName this framework serves.
	ProfileName() string
	// QueueSortFunc returns the QueueSort plugin's Less.
	QueueSortFunc() LessFunc
	// RunPreFilterPlugins runs every PreFilter; the first non-success stops.
	RunPreFilterPlugins(ctx context.Context, state *CycleState, pod *v1.Pod) *Status
	// RunFilterPlugins runs every Filter on one node; the first rejection
	// stops and is returned with the plugin name set.
	RunFilterPlugins(ctx context.Context, state *CycleState, pod *v1.Pod, nodeInfo *NodeInfo) *Status
	// RunPreScorePlugins runs every PreScore over the feasible nodes.
	RunPreScorePlugins(ctx context.Context, state *CycleState, pod *v1.Pod, nodes []*NodeInfo) *Status
	// RunScorePlugins scores every node with every Score plugin, normalizes
	// and weighs the scores, and returns them in the order of nodes.
	RunScorePlugins(ctx context.Context, state *CycleState, pod *v1.Pod, nodes []*NodeInfo) ([]NodePluginScores, *Status)
	// HasScorePlugins reports whether any Score plugin is enabled.
	HasScorePlugins() bool
	// RunReservePluginsReserve runs Reserve in order; the first failure stops.
	RunReservePluginsReserve(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
	// RunReservePluginsUnreserve runs Unreserve in reverse order.
	RunReservePluginsUnreserve(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string)
	// RunPostFilterPlugins runs the PostFilter plugins in order until one
	// succeeds; with none succeeding, the status is Unschedulable with their
	// messages.
	RunPostFilterPlugins(ctx context.Context, state *CycleState, pod *v1.Pod, filteredNodeStatusMap NodeToStatusMap) (*PostFilterResult, *Status)
	// HasPostFilterPlugins reports whether any PostFilter plugin is enabled.
	HasPostFilterPlugins() bool
	// RunPreBindPlugins runs every PreBind in order; the first failure stops.
	RunPreBindPlugins(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
	// RunBindPlugins binds the pod with the first Bind plugin.
	RunBindPlugins(ctx context.Context, state *CycleState, pod *v1.Pod, nodeName string) *Status
}
