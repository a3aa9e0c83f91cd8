// Package defaultpreemption is the DefaultPreemption PostFilter plugin: when no node
// fits a pod, it looks for a node where evicting pods of lower priority would make
// room, preempts the fewest and least important of them there (respecting
// PodDisruptionBudgets where it can), and nominates the pod to that node. Mirrors
// kube-scheduler's pkg/scheduler/framework/plugins/defaultpreemption and
// pkg/scheduler/framework/preemption.
package defaultpreemption

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins/names"
	"skiff.dev/services/scheduler/util"
)

// DefaultPreemption is the plugin. Build it with New.
type DefaultPreemption struct {
	fh framework.Handle
}

var _ framework.PostFilterPlugin = (*DefaultPreemption)(nil)

// New builds the plugin; it reads PodDisruptionBudgets through fh's lister (none
// considered without one).
func New(_ context.Context, fh framework.Handle) (framework.Plugin, error) {
	return &DefaultPreemption{fh: fh}, nil
}

// Name returns "DefaultPreemption".
func (*DefaultPreemption) Name() string { return names.DefaultPreemption }

// candidate is a node where preemption makes room, with the pods it evicts there.
type candidate struct {
	node          string
	victims       []*v1.Pod // most important first
	pdbViolations int
}

// PostFilter preempts for pod, if it may preempt and some node can take it once lower
// priority pods are gone. Success comes with the node the pod is nominated to; else the
// status is Unschedulable with kube's message ("preemption: 0/N nodes are available:
// ..."). Errors: the API refused to evict a victim.
func (pl *DefaultPreemption) PostFilter(ctx context.Context, state *framework.CycleState, pod *v1.Pod, m framework.NodeToStatusMap) (*framework.PostFilterResult, *framework.Status) {
	if ok, msg := pl.podEligibleToPreemptOthers(pod, m[pod.Status.NominatedNodeName]); !ok {
		return nil, framework.NewStatus(framework.Unschedulable, msg)
	}
	nodes := pl.fh.SnapshotSharedLister().List()
	if len(nodes) == 0 {
		return nil, framework.NewStatus(framework.Unschedulable, "preemption: no nodes available")
	}
	var pdbs []*policyv1.PodDisruptionBudget
	if lister := pl.fh.PDBLister(); lister != nil {
		var err error
		if pdbs, err = lister.List(labels.Everything()); err != nil {
			return nil, framework.AsStatus(err)
		}
	}
	var candidates []candidate
	statuses := map[string]*framework.Status{}
	for _, n := range nodes {
		name := n.Node().Name
		if s := m[name]; s != nil && s.Code() == framework.UnschedulableAndUnresolvable {
			statuses[name] = framework.NewStatus(framework.UnschedulableAndUnresolvable, "Preemption is not helpful for scheduling")
			continue
		}
		victims, violations, status := pl.selectVictimsOnNode(ctx, state, pod, n.Clone(), pdbs)
		if !status.IsSuccess() {
			statuses[name] = status
			continue
		}
		candidates = append(candidates, candidate{node: name, victims: victims, pdbViolations: violations})
	}
	if len(candidates) == 0 {
		return nil, framework.NewStatus(framework.Unschedulable, noCandidatesMessage(len(nodes), statuses))
	}
	best := pickOneNodeForPreemption(candidates)
	if err := pl.prepareCandidate(ctx, best, pod); err != nil {
		return nil, framework.AsStatus(err)
	}
	return &framework.PostFilterResult{NominatedNodeName: best.node}, nil
}

// noCandidatesMessage is kube's "preemption: 0/N nodes are available: ..." histogram.
func noCandidatesMessage(numNodes int, statuses map[string]*framework.Status) string {
	histogram := map[string]int{}
	for _, s := range statuses {
		for _, r := range s.Reasons() {
			histogram[r]++
		}
	}
	reasons := make([]string, 0, len(histogram))
	for r, n := range histogram {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("preemption: 0/%d nodes are available: %s.", numNodes, strings.Join(reasons, ", "))
}

// podEligibleToPreemptOthers: a pod whose policy is Never may not preempt; nor may one
// whose nominated node still has a lower-priority pod terminating because it was
// preempted (the room is on its way), unless the filters found that node can never
// take it.
func (pl *DefaultPreemption) podEligibleToPreemptOthers(pod *v1.Pod, nominatedNodeStatus *framework.Status) (bool, string) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return false, "not eligible due to preemptionPolicy=Never."
	}
	nominated := pod.Status.NominatedNodeName
	if nominated == "" || nominatedNodeStatus.Code() == framework.UnschedulableAndUnresolvable {
		return true, ""
	}
	if ni := pl.fh.SnapshotSharedLister().Get(nominated); ni != nil {
		priority := corev1helpers.PodPriority(pod)
		for _, pi := range ni.Pods {
			if corev1helpers.PodPriority(pi.Pod) < priority && terminatingByPreemption(pi.Pod) {
				return false, "not eligible due to a terminating pod on the nominated node."
			}
		}
	}
	return true, ""
}

// terminatingByPreemption: the pod is being deleted and the scheduler preempted it.
func terminatingByPreemption(pod *v1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler {
			return true
		}
	}
	return false
}

// selectVictimsOnNode finds the pods on nodeInfo (a copy it changes) to evict for pod:
// every pod of lower priority is taken off; if the pod still does not fit, the node is
// no candidate. Then they are put back one by one, most important first and those
// whose eviction would violate a budget before the others, each staying if the pod
// still fits. The rest are the victims; violations counts those violating a budget.
func (pl *DefaultPreemption) selectVictimsOnNode(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo, pdbs []*policyv1.PodDisruptionBudget) ([]*v1.Pod, int, *framework.Status) {
	priority := corev1helpers.PodPriority(pod)
	var potential []*framework.PodInfo
	for _, pi := range slices.Clone(nodeInfo.Pods) {
		if corev1helpers.PodPriority(pi.Pod) < priority {
			potential = append(potential, pi)
			if err := nodeInfo.RemovePod(pi.Pod); err != nil {
				return nil, 0, framework.AsStatus(err)
			}
		}
	}
	if len(potential) == 0 {
		return nil, 0, framework.NewStatus(framework.UnschedulableAndUnresolvable, "No preemption victims found for incoming pod")
	}
	if s := pl.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, nodeInfo); !s.IsSuccess() {
		return nil, 0, s
	}
	sort.SliceStable(potential, func(i, j int) bool { return moreImportantPod(potential[i].Pod, potential[j].Pod) })
	violating, nonViolating := filterPodsWithPDBViolation(potential, pdbs)
	var victims []*v1.Pod
	reprieve := func(pi *framework.PodInfo) (bool, error) {
		nodeInfo.AddPodInfo(pi)
		if pl.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, nodeInfo).IsSuccess() {
			return true, nil
		}
		victims = append(victims, pi.Pod)
		return false, nodeInfo.RemovePod(pi.Pod)
	}
	violations := 0
	for _, pi := range violating {
		fits, err := reprieve(pi)
		if err != nil {
			return nil, 0, framework.AsStatus(err)
		}
		if !fits {
			violations++
		}
	}
	for _, pi := range nonViolating {
		if _, err := reprieve(pi); err != nil {
			return nil, 0, framework.AsStatus(err)
		}
	}
	sort.SliceStable(victims, func(i, j int) bool { return moreImportantPod(victims[i], victims[j]) })
	return victims, violations, nil
}

// moreImportantPod orders pods by priority, then the earlier started first. Mirrors
// kube-scheduler's util.MoreImportantPod.
func moreImportantPod(p1, p2 *v1.Pod) bool {
	a, b := corev1helpers.PodPriority(p1), corev1helpers.PodPriority(p2)
	if a != b {
		return a > b
	}
	return podStartTime(p1).Before(podStartTime(p2))
}

// podStartTime is status.startTime, or now for a pod not started yet.
func podStartTime(pod *v1.Pod) time.Time {
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return time.Now()
}

// filterPodsWithPDBViolation splits pods (in order) into those whose eviction would
// take a budget below zero disruptions allowed and the others. A pod a budget already
// counts as disrupted costs it nothing more. Mirrors kube's filterPodsWithPDBViolation.
func filterPodsWithPDBViolation(pods []*framework.PodInfo, pdbs []*policyv1.PodDisruptionBudget) (violating, nonViolating []*framework.PodInfo) {
	allowed := make([]int32, len(pdbs))
	for i, pdb := range pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
	}
	for _, pi := range pods {
		pod := pi.Pod
		violates := false
		if len(pod.Labels) > 0 {
			for i, pdb := range pdbs {
				if pdb.Namespace != pod.Namespace {
					continue
				}
				selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil || selector.Empty() || !selector.Matches(labels.Set(pod.Labels)) {
					continue
				}
				if _, disrupted := pdb.Status.DisruptedPods[pod.Name]; disrupted {
					continue
				}
				allowed[i]--
				if allowed[i] < 0 {
					violates = true
				}
			}
		}
		if violates {
			violating = append(violating, pi)
		} else {
			nonViolating = append(nonViolating, pi)
		}
	}
	return violating, nonViolating
}

// pickOneNodeForPreemption chooses, in turn: the fewest budget violations; the lowest
// highest-priority victim; the lowest sum of victim priorities; the fewest victims; the
// latest start among the highest-priority victims; else the first. Mirrors kube's
// pickOneNodeForPreemption.
func pickOneNodeForPreemption(candidates []candidate) candidate {
	rules := []func(c candidate) int64{
		func(c candidate) int64 { return -int64(c.pdbViolations) },
		func(c candidate) int64 { return -int64(corev1helpers.PodPriority(c.victims[0])) },
		func(c candidate) int64 {
			var sum int64
			for _, v := range c.victims {
				// Offset so that a negative priority counts less than none at all.
				sum += int64(corev1helpers.PodPriority(v)) + int64(math.MaxInt32) + 1
			}
			return -sum
		},
		func(c candidate) int64 { return -int64(len(c.victims)) },
		func(c candidate) int64 { return earliestStartOfHighestPriority(c.victims).UnixNano() },
	}
	remaining := candidates
	for _, score := range rules {
		best := int64(math.MinInt64)
		var kept []candidate
		for _, c := range remaining {
			switch s := score(c); {
			case s > best:
				best, kept = s, []candidate{c}
			case s == best:
				kept = append(kept, c)
			}
		}
		remaining = kept
		if len(remaining) == 1 {
			break
		}
	}
	return remaining[0]
}

// earliestStartOfHighestPriority is the earliest start among the victims of the
// highest priority (victims are most important first).
func earliestStartOfHighestPriority(victims []*v1.Pod) time.Time {
	top := corev1helpers.PodPriority(victims[0])
	earliest := podStartTime(victims[0])
	for _, v := range victims[1:] {
		if corev1helpers.PodPriority(v) == top && podStartTime(v).Before(earliest) {
			earliest = podStartTime(v)
		}
	}
	return earliest
}

// prepareCandidate evicts the victims on c's node: each gets the DisruptionTarget
// condition (reason PreemptionByScheduler) and is deleted, with a Preempted event; the
// pods of lower priority nominated to the node lose their nomination, since the room
// is the preemptor's. Mirrors kube's Evaluator.prepareCandidate.
func (pl *DefaultPreemption) prepareCandidate(ctx context.Context, c candidate, pod *v1.Pod) error {
	cs := pl.fh.ClientSet()
	for _, victim := range c.victims {
		status := victim.Status.DeepCopy()
		cond := &v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler,
			Message: fmt.Sprintf("%s: preempting to accommodate a higher priority pod", pod.Spec.SchedulerName)}
		if util.UpdatePodCondition(status, cond) {
			if err := util.PatchPodStatus(ctx, cs, victim.Name, victim.Namespace, &victim.Status, status); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("preempting %s/%s: %w", victim.Namespace, victim.Name, err)
			}
		}
		if err := cs.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("preempting %s/%s: %w", victim.Namespace, victim.Name, err)
		}
		pl.fh.EventRecorder().Eventf(victim, v1.EventTypeNormal, "Preempted", "Preempted by pod %v on node %v", pod.UID, c.node)
	}
	if n := pl.fh.PodNominator(); n != nil {
		priority := corev1helpers.PodPriority(pod)
		for _, pi := range n.NominatedPodsForNode(c.node) {
			if pi.Pod.UID == pod.UID || corev1helpers.PodPriority(pi.Pod) >= priority {
				continue
			}
			n.DeleteNominatedPodIfExists(pi.Pod)
			if pi.Pod.Status.NominatedNodeName == "" {
				continue
			}
			status := pi.Pod.Status.DeepCopy()
			status.NominatedNodeName = ""
			if err := util.PatchPodStatus(ctx, cs, pi.Pod.Name, pi.Pod.Namespace, &pi.Pod.Status, status); err != nil && !apierrors.IsNotFound(err) {
				pl.fh.Logger().Error("clearing a lower-priority pod's nomination", "pod", pi.Pod.Namespace+"/"+pi.Pod.Name, "err", err)
			}
		}
	}
	return nil
}
