package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"skiff.dev/services/internal/tracing"

	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/internal/queue"
	"skiff.dev/services/scheduler/metrics"
	"skiff.dev/services/scheduler/util"
)

// ErrNoNodesAvailable is the scheduling error when the cluster has no nodes
// at all; its text is kube-scheduler's.
var ErrNoNodesAvailable = errors.New("no nodes available to schedule pods")

// noNodesPlugin stands in for a plugin in QueuedPodInfo.UnschedulablePlugins
// when a pod failed because there were no nodes: like a plugin rejection it
// parks the pod until a node event, instead of retrying it with backoff.
// kube-scheduler uses the same device for extenders (framework.ExtenderName).
const noNodesPlugin = "NoNodesAvailable"

// ScheduleResult is the outcome of the scheduling algorithm for one pod.
type ScheduleResult struct {
	// SuggestedHost is the chosen node.
	SuggestedHost string
	// EvaluatedNodes counts nodes filtered; FeasibleNodes those that passed.
	EvaluatedNodes int
	FeasibleNodes  int
}

// scheduleOne is one scheduling cycle: pop a pod, pick a node for it, assume
// it there and start its binding cycle in the background, so the next pod
// can be scheduled against a cache that already counts this one. Mirrors
// kube-scheduler's ScheduleOne.
func (s *Scheduler) scheduleOne(ctx context.Context) {
	pInfo, err := s.queue.Pop(ctx)
	if err != nil {
		return // closed or ctx done: Run is stopping
	}
	podCycle := s.queue.SchedulingCycle()
	pod := pInfo.Pod
	logger := s.logger.With("pod", podKey(pod))
	if s.skipPodSchedule(logger, pod) {
		s.queue.Done(pod.UID)
		return
	}
	logger.Debug("attempting to schedule pod", "attempt", pInfo.Attempts)
	// The cycle continues the trace of the request that created the pod, carried across
	// the watch by the pod's traceparent annotation; filter, score and bind are its children.
	ctx, span := s.tracer.Start(tracing.ContextWithObjectTrace(ctx, pod), "SchedulingCycle",
		trace.WithAttributes(tracing.PodAttributes(pod)...),
		trace.WithAttributes(attribute.Int("skiff.scheduler.attempt", pInfo.Attempts)))
	defer span.End()

	start := time.Now()
	state := framework.NewCycleState()
	result, err := s.schedulePod(ctx, state, pod)
	if err != nil {
		var status *framework.Status
		var fitErr *framework.FitError
		nominatedNode := ""
		switch {
		case errors.Is(err, ErrNoNodesAvailable):
			status = framework.NewStatus(framework.UnschedulableAndUnresolvable).WithError(err)
		case errors.As(err, &fitErr):
			nominatedNode = s.runPostFilter(ctx, logger, state, pod, fitErr)
			status = framework.NewStatus(framework.Unschedulable).WithError(err)
		default:
			status = framework.AsStatus(err)
		}
		s.handleSchedulingFailure(ctx, logger, pInfo, status, nominatedNode, podCycle, start)
		return
	}

	// Assume on a copy: the queue's object must keep an empty nodeName.
	assumedPInfo := pInfo.DeepCopy()
	assumed := assumedPInfo.Pod
	assumed.Spec.NodeName = result.SuggestedHost
	if err := s.cache.AssumePod(assumed); err != nil {
		s.handleSchedulingFailure(ctx, logger, pInfo, framework.AsStatus(fmt.Errorf("assume pod: %w", err)), "", podCycle, start)
		return
	}
	// Assumed on a node, the pod no longer holds room on the one it was nominated to.
	s.nominator.DeleteNominatedPodIfExists(assumed)
	if status := s.framework.RunReservePluginsReserve(ctx, state, assumed, result.SuggestedHost); !status.IsSuccess() {
		s.framework.RunReservePluginsUnreserve(ctx, state, assumed, result.SuggestedHost)
		if err := s.cache.ForgetPod(assumed); err != nil {
			logger.Error("forgetting assumed pod", "err", err)
		}
		s.handleSchedulingFailure(ctx, logger, pInfo, status, "", podCycle, start)
		return
	}

	s.bindings.Add(1)
	go func() {
		defer s.bindings.Done()
		s.bindingCycle(ctx, logger, state, pInfo, assumed, result, podCycle, start)
	}()
}

// skipPodSchedule reports whether the popped pod should not be scheduled:
// it is being deleted, it is already assumed (an update re-queued it while
// it was being bound), or the informer no longer has it unscheduled (deleted
// or bound meanwhile). Mirrors kube-scheduler's skipPodSchedule.
func (s *Scheduler) skipPodSchedule(logger *slog.Logger, pod *v1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		logger.Debug("skipping pod being deleted")
		return true
	}
	if s.cache.IsAssumedPod(pod) {
		logger.Debug("skipping pod already assumed")
		return true
	}
	current, err := s.podLister.Pods(pod.Namespace).Get(pod.Name)
	if err != nil || current.UID != pod.UID || current.Spec.NodeName != "" {
		logger.Debug("skipping pod deleted or assigned meanwhile")
		return true
	}
	return false
}

// schedulePod runs the scheduling algorithm on a fresh snapshot: filter every
// node, score the feasible ones, pick the best. It returns ErrNoNodesAvailable,
// a *framework.FitError when no node fits, or another error when a plugin
// failed. Mirrors kube-scheduler's schedulePod.
func (s *Scheduler) schedulePod(ctx context.Context, state *framework.CycleState, pod *v1.Pod) (ScheduleResult, error) {
	s.cache.UpdateSnapshot(s.snapshot)
	if s.snapshot.NumNodes() == 0 {
		return ScheduleResult{}, ErrNoNodesAvailable
	}
	filterCtx, filterSpan := s.tracer.Start(ctx, "Filter", trace.WithAttributes(attribute.Int("skiff.scheduler.nodes", s.snapshot.NumNodes())))
	feasible, diagnosis, err := s.findNodesThatFitPod(filterCtx, state, pod)
	filterSpan.SetAttributes(attribute.Int("skiff.scheduler.feasible_nodes", len(feasible)))
	tracing.RecordError(filterSpan, err)
	filterSpan.End()
	if err != nil {
		return ScheduleResult{}, err
	}
	if len(feasible) == 0 {
		return ScheduleResult{}, &framework.FitError{Pod: pod, NumAllNodes: s.snapshot.NumNodes(), Diagnosis: diagnosis}
	}
	result := ScheduleResult{EvaluatedNodes: len(feasible) + len(diagnosis.NodeToStatusMap), FeasibleNodes: len(feasible)}
	scoreCtx, scoreSpan := s.tracer.Start(ctx, "Score", trace.WithAttributes(attribute.Int("skiff.scheduler.feasible_nodes", len(feasible))))
	defer scoreSpan.End()
	if len(feasible) == 1 {
		// One candidate needs no scoring; kube-scheduler skips it too.
		result.SuggestedHost = feasible[0].Node().Name
		scoreSpan.SetAttributes(semconv.K8SNodeName(result.SuggestedHost))
		return result, nil
	}
	scores, err := s.prioritizeNodes(scoreCtx, state, pod, feasible)
	if err != nil {
		tracing.RecordError(scoreSpan, err)
		return ScheduleResult{}, err
	}
	result.SuggestedHost = s.selectHost(scores)
	scoreSpan.SetAttributes(semconv.K8SNodeName(result.SuggestedHost))
	return result, nil
}

// findNodesThatFitPod runs the PreFilter plugins once and the Filter
// plugins on every node, and returns the nodes that passed with the
// statuses of those that did not. Mirrors kube-scheduler's
// findNodesThatFitPod (sequential, and always over all nodes).
func (s *Scheduler) findNodesThatFitPod(ctx context.Context, state *framework.CycleState, pod *v1.Pod) ([]*framework.NodeInfo, framework.Diagnosis, error) {
	diagnosis := framework.Diagnosis{NodeToStatusMap: framework.NodeToStatusMap{}, UnschedulablePlugins: sets.New[string]()}
	nodes := s.snapshot.List()
	if status := s.framework.RunPreFilterPlugins(ctx, state, pod); !status.IsSuccess() {
		if !status.IsRejected() {
			return nil, diagnosis, status.AsError()
		}
		for _, n := range nodes {
			diagnosis.NodeToStatusMap[n.Node().Name] = status
		}
		diagnosis.PreFilterMsg = status.Message()
		diagnosis.UnschedulablePlugins.Insert(status.Plugin())
		return nil, diagnosis, nil
	}
	var feasible []*framework.NodeInfo
	for _, n := range nodes {
		status := s.framework.RunFilterPluginsWithNominatedPods(ctx, state, pod, n)
		switch {
		case status.IsSuccess():
			feasible = append(feasible, n)
		case status.IsRejected():
			diagnosis.NodeToStatusMap[n.Node().Name] = status
			diagnosis.UnschedulablePlugins.Insert(status.Plugin())
		default:
			return nil, diagnosis, status.AsError()
		}
	}
	return feasible, diagnosis, nil
}

// prioritizeNodes runs PreScore and Score over the feasible nodes and
// returns each node's weighted total. Mirrors kube-scheduler's
// prioritizeNodes.
func (s *Scheduler) prioritizeNodes(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodes []*framework.NodeInfo) ([]framework.NodePluginScores, error) {
	if !s.framework.HasScorePlugins() {
		scores := make([]framework.NodePluginScores, len(nodes))
		for i, n := range nodes {
			scores[i] = framework.NodePluginScores{Name: n.Node().Name, TotalScore: 1}
		}
		return scores, nil
	}
	if status := s.framework.RunPreScorePlugins(ctx, state, pod, nodes); !status.IsSuccess() {
		return nil, status.AsError()
	}
	scores, status := s.framework.RunScorePlugins(ctx, state, pod, nodes)
	if !status.IsSuccess() {
		return nil, status.AsError()
	}
	return scores, nil
}

// selectHost returns the node with the highest total score, choosing
// uniformly at random among ties (reservoir sampling) so equal nodes share
// the load. Mirrors kube-scheduler's selectHost.
func (s *Scheduler) selectHost(scores []framework.NodePluginScores) string {
	best, ties := 0, 1
	for i := 1; i < len(scores); i++ {
		switch {
		case scores[i].TotalScore > scores[best].TotalScore:
			best, ties = i, 1
		case scores[i].TotalScore == scores[best].TotalScore:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return scores[best].Name
}

// bindingCycle runs PreBind and binds the assumed pod. On failure it unreserves and forgets the assumption
// (freeing the node for the pods parked behind it) and retries the pod with
// backoff. Mirrors kube-scheduler's bindingCycle and handleBindingCycleError.
func (s *Scheduler) bindingCycle(ctx context.Context, logger *slog.Logger, state *framework.CycleState, pInfo *framework.QueuedPodInfo, assumed *v1.Pod, result ScheduleResult, podCycle int64, start time.Time) {
	// A bind failure is never "unschedulable", so the pod's in-flight
	// bookkeeping can end now.
	s.queue.Done(assumed.UID)
	// PreBind readies the node's side (the pod's volumes bound or provisioned), then
	// Bind writes the binding.
	preBindCtx, preBindSpan := s.tracer.Start(ctx, "PreBind", trace.WithAttributes(tracing.PodAttributes(assumed)...))
	status := s.framework.RunPreBindPlugins(preBindCtx, state, assumed, result.SuggestedHost)
	tracing.RecordError(preBindSpan, status.AsError())
	preBindSpan.End()
	if status.IsSuccess() {
		bindCtx, bindSpan := s.tracer.Start(ctx, "Bind", trace.WithAttributes(tracing.PodAttributes(assumed)...))
		status = s.framework.RunBindPlugins(bindCtx, state, assumed, result.SuggestedHost)
		tracing.RecordError(bindSpan, status.AsError())
		bindSpan.End()
	}
	if err := s.cache.FinishBinding(assumed); err != nil {
		logger.Error("finishing binding in the scheduler cache", "err", err)
	}
	if !status.IsSuccess() {
		s.framework.RunReservePluginsUnreserve(ctx, state, assumed, result.SuggestedHost)
		if err := s.cache.ForgetPod(assumed); err != nil {
			logger.Error("forgetting assumed pod", "err", err)
		} else {
			// The room the pod held is free again.
			s.queue.MoveAllToActiveOrBackoffQueue(queue.EventAssignedPodDelete, func(p *v1.Pod) bool { return p.UID != assumed.UID })
		}
		s.handleSchedulingFailure(ctx, logger, pInfo, status, "", podCycle, start)
		return
	}
	s.recorder.Eventf(assumed, v1.EventTypeNormal, "Scheduled", "Successfully assigned %v/%v to %v", assumed.Namespace, assumed.Name, result.SuggestedHost)
	logger.Info("bound pod to node", "node", result.SuggestedHost, "evaluatedNodes", result.EvaluatedNodes, "feasibleNodes", result.FeasibleNodes, "attempts", pInfo.Attempts)
	s.metrics.Observe(metrics.Scheduled, s.schedulerName, start)
}

// runPostFilter runs the PostFilter plugins (preemption) for a pod no node
// fits and returns the node it is nominated to ("" if none). What they say
// when they cannot help joins the FitError's message.
func (s *Scheduler) runPostFilter(ctx context.Context, logger *slog.Logger, state *framework.CycleState, pod *v1.Pod, fitErr *framework.FitError) string {
	if !s.framework.HasPostFilterPlugins() {
		return ""
	}
	ctx, span := s.tracer.Start(ctx, "PostFilter")
	defer span.End()
	result, status := s.framework.RunPostFilterPlugins(ctx, state, pod, fitErr.Diagnosis.NodeToStatusMap)
	switch {
	case status.IsSuccess() && result != nil && result.NominatedNodeName != "":
		span.SetAttributes(semconv.K8SNodeName(result.NominatedNodeName))
		logger.Info("preempted pods to make room", "nominatedNode", result.NominatedNodeName)
		return result.NominatedNodeName
	case status.IsRejected():
		fitErr.Diagnosis.PostFilterMsg = status.Message()
	case !status.IsSuccess():
		tracing.RecordError(span, status.AsError())
		logger.Error("preemption failed", "err", status.AsError())
	}
	return ""
}

// handleSchedulingFailure re-queues a pod whose attempt failed and records
// why on the pod: condition PodScheduled=False with reason Unschedulable
// (no node fits; the message is the FitError) or SchedulerError (something
// broke), and status.nominatedNodeName when preemption nominated it to a
// node. Rejected pods are parked until the cluster changes; errors are
// retried with backoff. A pod deleted or bound meanwhile is dropped.
// Mirrors kube-scheduler's handleSchedulingFailure.
func (s *Scheduler) handleSchedulingFailure(ctx context.Context, logger *slog.Logger, pInfo *framework.QueuedPodInfo, status *framework.Status, nominatedNode string, podCycle int64, start time.Time) {
	if ctx.Err() != nil {
		// Stopping (shut down, or the Lease lost): the attempt ended for the scheduler's
		// sake, not the pod's, and a binding cut short may have been stored all the
		// same. No FailedScheduling on a pod that may be bound; the next leader finds
		// it bound or pending.
		logger.Info("scheduler stopping; attempt abandoned", "err", status.AsError())
		s.queue.Done(pInfo.Pod.UID)
		return
	}
	reason := v1.PodReasonSchedulerError
	result := metrics.Error
	if status.IsRejected() {
		reason = v1.PodReasonUnschedulable
		result = metrics.Unschedulable
	}
	s.metrics.Observe(result, s.schedulerName, start)

	err := status.AsError()
	msg := status.Message()
	tracing.RecordError(trace.SpanFromContext(ctx), err)
	var fitErr *framework.FitError
	switch {
	case errors.Is(err, ErrNoNodesAvailable):
		pInfo.UnschedulablePlugins = sets.New(noNodesPlugin)
		logger.Info("unable to schedule pod: no nodes are registered, waiting")
	case errors.As(err, &fitErr):
		pInfo.UnschedulablePlugins = fitErr.Diagnosis.UnschedulablePlugins
		logger.Info("unable to schedule pod: no fit, waiting", "reason", msg)
	default:
		pInfo.UnschedulablePlugins = nil
		logger.Error("error scheduling pod, retrying", "err", err)
	}

	cached, getErr := s.podLister.Pods(pInfo.Pod.Namespace).Get(pInfo.Pod.Name)
	if getErr != nil || cached.UID != pInfo.Pod.UID || cached.Spec.NodeName != "" {
		logger.Debug("pod deleted or assigned meanwhile, not re-queueing")
		s.queue.Done(pInfo.Pod.UID)
		return
	}
	pInfo.PodInfo = framework.NewPodInfo(cached)
	if nominatedNode != "" {
		s.nominator.AddNominatedPod(pInfo.PodInfo, nominatedNode)
	}
	if err := s.queue.AddUnschedulableIfNotPresent(pInfo, podCycle); err != nil {
		logger.Debug("not re-queueing pod", "reason", err)
	}
	s.recorder.Event(cached, v1.EventTypeWarning, "FailedScheduling", msg)

	cond := &v1.PodCondition{
		Type:               v1.PodScheduled,
		Status:             v1.ConditionFalse,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: cached.Generation,
	}
	if err := s.patchPodScheduledCondition(ctx, cached, cond, nominatedNode); err != nil {
		logger.Error("updating pod condition", "err", err)
	}
}

// patchPodScheduledCondition records cond (and nominatedNode, when set) in the
// pod's status with a strategic-merge PATCH of pods/status computed against
// the cached pod, so it sends only what changed and needs no resourceVersion
// (no conflict loop). It writes nothing if nothing changed. Mirrors
// kube-scheduler's updatePod in pkg/scheduler/schedule_one.go.
func (s *Scheduler) patchPodScheduledCondition(ctx context.Context, pod *v1.Pod, cond *v1.PodCondition, nominatedNode string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.apiTimeout)
	defer cancel()
	status := pod.Status.DeepCopy()
	changed := util.UpdatePodCondition(status, cond.DeepCopy())
	if nominatedNode != "" && status.NominatedNodeName != nominatedNode {
		status.NominatedNodeName, changed = nominatedNode, true
	}
	if !changed {
		return nil
	}
	err := util.PatchPodStatus(ctx, s.client, pod.Name, pod.Namespace, &pod.Status, status)
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing to record
	}
	return err
}
