package framework

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Score bounds every Score plugin must respect after normalization. Mirrors
// kube-scheduler's MaxNodeScore / MinNodeScore.
const (
	MaxNodeScore int64 = 100
	MinNodeScore int64 = 0
)

// PodInfo is a pod plus what the scheduler derives from it once: its
// resource requests. Mirrors kube-scheduler's framework.PodInfo.
type PodInfo struct {
	Pod *v1.Pod
	// Requests is what the pod asks for (containers summed, init containers
	// at their max, overhead added); the Fit filter uses it.
	Requests Resource
	// NonZeroRequests is Requests with kube's defaults (100m cpu, 200 MiB
	// memory) for containers that request nothing; scoring uses it so that
	// request-less pods still spread.
	NonZeroRequests Resource
}

// NewPodInfo computes the PodInfo of pod.
func NewPodInfo(pod *v1.Pod) *PodInfo {
	return &PodInfo{
		Pod:             pod,
		Requests:        PodRequests(pod, false),
		NonZeroRequests: PodRequests(pod, true),
	}
}

// QueuedPodInfo is a pod waiting in the scheduling queue, with the
// bookkeeping the queue uses for ordering and backoff. Mirrors
// kube-scheduler's framework.QueuedPodInfo.
type QueuedPodInfo struct {
	*PodInfo
	// Timestamp is when the pod was last added to a queue; backoff counts
	// from it and the unschedulable-pods flush compares against it.
	Timestamp time.Time
	// Attempts counts scheduling attempts; it drives the backoff doubling.
	Attempts int
	// InitialAttemptTimestamp is when the pod was first popped, nil before.
	InitialAttemptTimestamp *time.Time
	// UnschedulablePlugins are the plugins that rejected the pod in its last
	// attempt. Empty after an Error, which sends the pod to backoff instead
	// of parking it with the unschedulable pods.
	UnschedulablePlugins sets.Set[string]
}

// DeepCopy returns a copy with its own pod object.
func (p *QueuedPodInfo) DeepCopy() *QueuedPodInfo {
	c := *p
	pi := *p.PodInfo
	pi.Pod = p.Pod.DeepCopy()
	c.PodInfo = &pi
	c.UnschedulablePlugins = p.UnschedulablePlugins.Clone()
	return &c
}

// NodeScore is one node's score from one plugin.
type NodeScore struct {
	Name  string
	Score int64
}

// NodeScoreList is one plugin's scores for all feasible nodes, in node order.
type NodeScoreList []NodeScore

// PluginScore is one plugin's weighted score for a node.
type PluginScore struct {
	Name  string
	Score int64
}

// NodePluginScores is the breakdown and the weighted total of a node's
// scores. Mirrors kube-scheduler's framework.NodePluginScores.
type NodePluginScores struct {
	Name       string
	Scores     []PluginScore
	TotalScore int64
}

// NodeToStatusMap holds, for each rejected node, the status that rejected it.
type NodeToStatusMap map[string]*Status

// Diagnosis explains why no node fit: the per-node statuses and the plugins
// that rejected the pod. Mirrors kube-scheduler's framework.Diagnosis.
type Diagnosis struct {
	NodeToStatusMap      NodeToStatusMap
	UnschedulablePlugins sets.Set[string]
	// PreFilterMsg is set when a PreFilter plugin rejected the pod before
	// any node was looked at; it then replaces the per-node histogram.
	PreFilterMsg string
	// PostFilterMsg is what the PostFilter plugins (preemption) said when they
	// could not help, appended to the message.
	PostFilterMsg string
}

// NoNodeAvailableMsg starts every FitError message; %v is the node count.
const NoNodeAvailableMsg = "0/%v nodes are available"

// FitError is returned when a pod fits no node. Its message is what users
// read in the PodScheduled condition and `kubectl describe`, e.g.
// "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.".
// Mirrors kube-scheduler's framework.FitError.
type FitError struct {
	Pod         *v1.Pod
	NumAllNodes int
	Diagnosis   Diagnosis
}

// Error formats the reasons as a histogram: each distinct reason with the
// number of nodes that gave it, sorted as strings, comma-separated, ending
// with a period — byte for byte kube-scheduler's format.
func (f *FitError) Error() string {
	msg := fmt.Sprintf(NoNodeAvailableMsg+":", f.NumAllNodes)
	if f.Diagnosis.PreFilterMsg != "" {
		msg += " " + f.Diagnosis.PreFilterMsg + "."
		if f.Diagnosis.PostFilterMsg != "" {
			msg += " " + f.Diagnosis.PostFilterMsg
		}
		return msg
	}
	histogram := map[string]int{}
	for _, status := range f.Diagnosis.NodeToStatusMap {
		for _, reason := range status.Reasons() {
			histogram[reason]++
		}
	}
	reasons := make([]string, 0, len(histogram))
	for reason, count := range histogram {
		reasons = append(reasons, fmt.Sprintf("%v %v", count, reason))
	}
	sort.Strings(reasons)
	if len(reasons) > 0 {
		msg += " " + strings.Join(reasons, ", ") + "."
	}
	if f.Diagnosis.PostFilterMsg != "" {
		msg += " " + f.Diagnosis.PostFilterMsg
	}
	return msg
}
