// Package job is kube-controller-manager's Job controller: it runs a Job's pods to
// completion — up to parallelism at once until completions pods have succeeded (for an
// Indexed Job, one succeeded pod per completion index, each pod told its index through
// the batch.kubernetes.io/job-completion-index annotation and label, the
// JOB_COMPLETION_INDEX variable and hostname <job>-<index>) — replaces failed pods after
// an exponential back-off, applies the pod failure policy (FailJob, Ignore, Count,
// FailIndex) to failed pods, fails the Job once backoffLimit, backoffLimitPerIndex /
// maxFailedIndexes or activeDeadlineSeconds is exceeded, completes it early when a
// success policy is met, honours suspend, and adopts matching orphan pods and releases
// pods that stopped matching. It writes status: active, ready, terminating, succeeded,
// failed, completedIndexes, failedIndexes, startTime, completionTime, and the interim
// FailureTarget / SuccessCriteriaMet conditions before Failed / Complete.
//
// Pods are counted with the batch.kubernetes.io/job-tracking finalizer: every pod is
// created (or adopted) with it, a finished pod is first recorded in
// status.uncountedTerminatedPods, then its finalizer is removed, then it moves into the
// succeeded or failed counters — so no finished pod is lost or counted twice, even if
// it is deleted at once. Jobs whose spec.managedBy names another controller are left
// alone. Mirrors k8s.io/kubernetes/pkg/controller/job (kube 1.32).
package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/expectations"
	"skiff.dev/services/controllermanager/internal/worker"
	"skiff.dev/services/controllermanager/podcontrol"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "job-controller"

// Back-off before a failed pod is replaced: DefaultPodFailureBackoff after the first
// failure, doubled for each further one, at most MaxPodFailureBackoff. Mirrors
// DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff.
const (
	DefaultPodFailureBackoff = 10 * time.Second
	MaxPodFailureBackoff     = 10 * time.Minute
)

// MaxUncountedPods caps status.uncountedTerminatedPods (and the finalizers one sync
// removes). Mirrors MaxUncountedPods.
const MaxUncountedPods = 500

// maxPodCreateDeletePerSync caps the pods one sync creates or deletes.
const maxPodCreateDeletePerSync = 500

var controllerKind = batchv1.SchemeGroupVersion.WithKind("Job")

// Controller is the Job controller.
type Controller struct {
	// PodFailureBackoff and MaxPodFailureBackoff set the back-off (defaults above);
	// change them before Run.
	PodFailureBackoff, MaxPodFailureBackoff time.Duration

	client       kubernetes.Interface
	recorder     record.EventRecorder
	podControl   podcontrol.PodControl
	jobLister    batchlisters.JobLister
	podLister    corelisters.PodLister
	synced       []cache.InformerSynced
	expectations *expectations.Expectations
	finalizers   *finalizerExpectations
	backoff      *backoffStore
	queue        workqueue.TypedRateLimitingInterface[string]
	// orphanQueue holds "namespace/name" of pods that carry the tracking finalizer but
	// no live, unfinished Job of theirs: the finalizer must go.
	orphanQueue workqueue.TypedRateLimitingInterface[string]
	log         *slog.Logger
	now         func() time.Time
}

// New builds the controller over the factory's Job and Pod informers.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	jobInformer := factory.Batch().V1().Jobs()
	podInformer := factory.Core().V1().Pods()
	c := &Controller{
		PodFailureBackoff:    DefaultPodFailureBackoff,
		MaxPodFailureBackoff: MaxPodFailureBackoff,
		client:               client,
		recorder:             recorder,
		podControl:           podcontrol.PodControl{Client: client, Recorder: recorder},
		jobLister:            jobInformer.Lister(),
		podLister:            podInformer.Lister(),
		synced:               []cache.InformerSynced{jobInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		expectations:         expectations.New(),
		finalizers:           &finalizerExpectations{uids: map[string]sets.Set[types.UID]{}},
		backoff:              &backoffStore{records: map[string]backoffRecord{}},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job"}),
		orphanQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job_orphan_pod"}),
		log: slog.With("controller", Name),
		now: time.Now,
	}
	_, _ = jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.updateJob,
		DeleteFunc: c.deleteJob,
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: func(obj interface{}) { c.deletePod(obj, true) },
	})
	return c
}

// Run waits for the informers' caches, then runs workers on the Job queue and as many
// on the orphan pod queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		worker.Run(ctx, "job-orphan-pods", c.orphanQueue, c.synced, workers, c.log, c.syncOrphanPod)
	}()
	worker.Run(ctx, "job", c.queue, c.synced, workers, c.log, c.syncJob)
	wg.Wait()
}

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// resolveControllerRef returns the Job ref points at, if it is in the cache with that
// uid.
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *batchv1.Job {
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return nil
	}
	job, err := c.jobLister.Jobs(namespace).Get(ref.Name)
	if err != nil || job.UID != ref.UID {
		return nil
	}
	return job
}

// podJobs returns the Jobs whose selector matches the pod's labels.
func (c *Controller) podJobs(pod *corev1.Pod) []*batchv1.Job {
	if len(pod.Labels) == 0 {
		return nil
	}
	jobs, err := c.jobLister.Jobs(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var matching []*batchv1.Job
	for _, j := range jobs {
		sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		matching = append(matching, j)
	}
	return matching
}

func jobKey(job *batchv1.Job) string { return job.Namespace + "/" + job.Name }

// addPod: a pod of a Job is a creation observed; an orphan may be adopted by a Job
// whose selector matches (and loses its finalizer if it still has one). Mirrors addPod.
func (c *Controller) addPod(obj interface{}) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod, false)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if job := c.resolveControllerRef(pod.Namespace, ref); job != nil {
			c.expectations.CreationObserved(jobKey(job))
			c.queue.Add(jobKey(job))
		}
		return
	}
	if hasJobTrackingFinalizer(pod) {
		c.orphanQueue.Add(podcontrol.Key(pod))
	}
	for _, job := range c.podJobs(pod) {
		c.queue.Add(jobKey(job))
	}
}

// updatePod wakes the Job controlling the pod (and the one that did, if the reference
// changed); for an orphan whose labels or reference changed, every Job that may adopt
// it. A pod being deleted counts as a deletion observed. Mirrors updatePod.
func (c *Controller) updatePod(old, cur interface{}) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if curPod.DeletionTimestamp != nil {
		c.deletePod(curPod, false)
		return
	}
	finalizerRemoved := !hasJobTrackingFinalizer(curPod)
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if job := c.resolveControllerRef(oldPod.Namespace, oldRef); job != nil {
			if finalizerRemoved {
				c.finalizers.observed(jobKey(job), curPod.UID)
			}
			c.queue.Add(jobKey(job))
		}
	}
	if curRef != nil {
		if job := c.resolveControllerRef(curPod.Namespace, curRef); job != nil {
			if finalizerRemoved {
				c.finalizers.observed(jobKey(job), curPod.UID)
			}
			c.queue.Add(jobKey(job))
		}
		return
	}
	// An orphan: it must lose the finalizer, and a Job may want it.
	if hasJobTrackingFinalizer(curPod) {
		c.orphanQueue.Add(podcontrol.Key(curPod))
	}
	if refChanged || !reflect.DeepEqual(curPod.Labels, oldPod.Labels) {
		for _, job := range c.podJobs(curPod) {
			c.queue.Add(jobKey(job))
		}
	}
}

// deletePod: the deletion (or, final false, the deletion timestamp) of a Job's pod is
// observed; the finalizer of a pod whose Job is gone or finished goes through the
// orphan queue. Mirrors deletePod.
func (c *Controller) deletePod(obj interface{}, final bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(pod)
	hasFinalizer := hasJobTrackingFinalizer(pod)
	if ref == nil {
		if hasFinalizer {
			c.orphanQueue.Add(podcontrol.Key(pod))
		}
		return
	}
	job := c.resolveControllerRef(pod.Namespace, ref)
	if job == nil || IsFinished(job) {
		if hasFinalizer {
			c.orphanQueue.Add(podcontrol.Key(pod))
		}
		return
	}
	key := jobKey(job)
	c.expectations.DeletionObserved(key, podcontrol.Key(pod))
	if final || !hasFinalizer {
		c.finalizers.observed(key, pod.UID)
	}
	c.queue.Add(key)
}

// updateJob syncs the Job, re-arms its active deadline when it changed, and for a
// finished Job queues the finalizer removal of any pod left with one. Mirrors
// updateJob.
func (c *Controller) updateJob(old, cur interface{}) {
	oldJob, curJob := old.(*batchv1.Job), cur.(*batchv1.Job)
	if IsFinished(curJob) {
		c.enqueuePodsWithFinalizer(curJob)
		return
	}
	c.queue.Add(jobKey(curJob))
	if curJob.Status.StartTime != nil && curJob.Spec.ActiveDeadlineSeconds != nil &&
		!ptr.Equal(oldJob.Spec.ActiveDeadlineSeconds, curJob.Spec.ActiveDeadlineSeconds) {
		total := time.Duration(*curJob.Spec.ActiveDeadlineSeconds) * time.Second
		c.queue.AddAfter(jobKey(curJob), total-c.now().Sub(curJob.Status.StartTime.Time))
	}
}

// deleteJob forgets the Job and queues the finalizer removal of its pods.
func (c *Controller) deleteJob(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	c.queue.Add(jobKey(job))
	c.enqueuePodsWithFinalizer(job)
}

// enqueuePodsWithFinalizer puts on the orphan queue every pod matching the Job's
// selector that still has the tracking finalizer. Mirrors enqueueLabelSelector.
func (c *Controller) enqueuePodsWithFinalizer(job *batchv1.Job) {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return
	}
	pods, err := c.podLister.Pods(job.Namespace).List(sel)
	if err != nil {
		return
	}
	for _, p := range pods {
		if hasJobTrackingFinalizer(p) {
			c.orphanQueue.Add(podcontrol.Key(p))
		}
	}
}

// syncOrphanPod removes the tracking finalizer from a pod that no live, unfinished
// batch/v1 Job controls (a Job managed by another controller keeps its pods'
// finalizers). Mirrors syncOrphanPod / handleSingleOrphanPod.
func (c *Controller) syncOrphanPod(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
			return nil
		}
		if job := c.resolveControllerRef(namespace, ref); job != nil {
			if managedByExternalController(job) || !IsFinished(job) {
				return nil
			}
		}
	}
	if patch := removeTrackingFinalizerPatch(pod); patch != nil {
		if _, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// IsFinished reports whether the Job has a Complete or Failed condition that is True.
func IsFinished(job *batchv1.Job) bool {
	return hasCondition(job, batchv1.JobComplete) || hasCondition(job, batchv1.JobFailed)
}

func hasCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	c := findCondition(job.Status.Conditions, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

func findCondition(list []batchv1.JobCondition, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// managedByExternalController: spec.managedBy names a controller other than this one.
func managedByExternalController(job *batchv1.Job) bool {
	return job.Spec.ManagedBy != nil && *job.Spec.ManagedBy != batchv1.JobControllerName
}

func hasJobTrackingFinalizer(pod *corev1.Pod) bool {
	for _, f := range pod.Finalizers {
		if f == batchv1.JobTrackingFinalizer {
			return true
		}
	}
	return false
}

// removeTrackingFinalizerPatch is the strategic merge patch that drops the tracking
// finalizer, or nil when the pod has none.
func removeTrackingFinalizerPatch(pod *corev1.Pod) []byte {
	if !hasJobTrackingFinalizer(pod) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"$deleteFromPrimitiveList/finalizers": []string{batchv1.JobTrackingFinalizer},
	}})
	return patch
}

// isPodFailed: phase Failed, or — unless only failed pods are replaced — being deleted
// without having succeeded. Mirrors isPodFailed.
func isPodFailed(p *corev1.Pod, job *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailedPods(job) {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

// isPodTerminating: being deleted, not yet in a terminal phase.
func isPodTerminating(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// onlyReplaceFailedPods: podReplacementPolicy Failed (always so with a pod failure
// policy): a terminating pod is replaced only once it has failed.
func onlyReplaceFailedPods(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.PodReplacementPolicy, batchv1.TerminatingOrFailed) == batchv1.Failed || job.Spec.PodFailurePolicy != nil
}

// syncJobCtx is what one sync knows about a Job. Mirrors syncJobCtx.
type syncJobCtx struct {
	job                   *batchv1.Job
	pods, activePods      []*corev1.Pod
	ready, terminating    int32
	succeeded, failed     int32
	uncountedSucceeded    sets.Set[types.UID]
	uncountedFailed       sets.Set[types.UID]
	expectedRmFinalizers  sets.Set[types.UID]
	finishedCondition     *batchv1.JobCondition
	prevSucceededIndexes  orderedIntervals
	succeededIndexes      orderedIntervals
	failedIndexes         *orderedIntervals
	podsWithDelayedDelete map[int]*corev1.Pod
	newBackoffRecord      backoffRecord
}

// syncJob runs one Job a step further and writes its status. Mirrors
// Controller.syncJob.
func (c *Controller) syncJob(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	shared, err := c.jobLister.Jobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.finalizers.forget(key)
		c.backoff.remove(key)
		return nil
	}
	if err != nil {
		return err
	}
	if managedByExternalController(shared) {
		return nil
	}
	if IsFinished(shared) {
		c.backoff.remove(key)
		return nil
	}
	job := shared.DeepCopy()
	if m := job.Spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		c.recorder.Event(job, corev1.EventTypeWarning, "UnknownCompletionMode", "Skipped Job sync because completion mode is unknown")
		return nil
	}
	if job.Status.UncountedTerminatedPods == nil {
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	now := c.now()
	// Expectations first: a pod created after the listing below must not slip in.
	satisfied := c.expectations.Satisfied(key)
	pods, err := c.podsFor(ctx, job)
	if err != nil {
		return err
	}
	jobCtx := &syncJobCtx{
		job:                  job,
		pods:                 pods,
		uncountedSucceeded:   sets.New(job.Status.UncountedTerminatedPods.Succeeded...),
		uncountedFailed:      sets.New(job.Status.UncountedTerminatedPods.Failed...),
		expectedRmFinalizers: c.finalizers.expected(key),
	}
	for _, p := range pods {
		if podcontrol.IsActive(p) {
			jobCtx.activePods = append(jobCtx.activePods, p)
			if podcontrol.IsReady(p) {
				jobCtx.ready++
			}
		}
		if isPodTerminating(p) {
			jobCtx.terminating++
		}
	}
	active := int32(len(jobCtx.activePods))
	newSucceeded, newFailed := newFinishedPods(jobCtx)
	jobCtx.succeeded = job.Status.Succeeded + int32(len(newSucceeded)) + int32(jobCtx.uncountedSucceeded.Len())
	jobCtx.failed = job.Status.Failed + nonIgnoredFailedCount(job, newFailed) + int32(jobCtx.uncountedFailed.Len())

	if job.Status.StartTime == nil && !suspended(job) {
		job.Status.StartTime = &metav1.Time{Time: now}
	}
	jobCtx.newBackoffRecord = c.backoff.newBackoffRecord(key, newSucceeded, newFailed)

	// The end state, in kube's order: an earlier sync's SuccessCriteriaMet or
	// FailureTarget stands; then the pod failure policy, the backoff limits and the
	// deadline; then, for Indexed Jobs, failed indexes and the success policy.
	if cond := findCondition(job.Status.Conditions, batchv1.JobSuccessCriteriaMet); cond != nil && cond.Status == corev1.ConditionTrue {
		jobCtx.finishedCondition = cond
	}
	if jobCtx.finishedCondition == nil {
		if ft := findCondition(job.Status.Conditions, batchv1.JobFailureTarget); ft != nil && ft.Status == corev1.ConditionTrue {
			jobCtx.finishedCondition = newCondition(batchv1.JobFailed, ft.Reason, ft.Message, now)
		} else if msg := failJobMessage(job, pods); msg != nil {
			jobCtx.finishedCondition = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, *msg, now)
		}
	}
	if jobCtx.finishedCondition == nil {
		switch {
		case jobCtx.failed > *job.Spec.BackoffLimit || pastBackoffLimitOnFailure(job, pods):
			jobCtx.finishedCondition = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", now)
		case c.pastActiveDeadline(job, now):
			jobCtx.finishedCondition = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline", now)
		case job.Spec.ActiveDeadlineSeconds != nil && !suspended(job):
			remaining := time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second - now.Sub(job.Status.StartTime.Time)
			c.queue.AddAfter(key, remaining+10*time.Millisecond)
		}
	}
	if isIndexedJob(job) {
		jobCtx.prevSucceededIndexes, jobCtx.succeededIndexes = calculateSucceededIndexes(job, pods)
		jobCtx.succeeded = int32(jobCtx.succeededIndexes.total())
		if hasBackoffLimitPerIndex(job) {
			jobCtx.failedIndexes = calculateFailedIndexes(job, pods)
			if jobCtx.finishedCondition == nil {
				failedTotal := jobCtx.failedIndexes.total()
				if job.Spec.MaxFailedIndexes != nil && failedTotal > int(*job.Spec.MaxFailedIndexes) {
					jobCtx.finishedCondition = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes", now)
				} else if failedTotal > 0 && failedTotal+jobCtx.succeededIndexes.total() >= int(*job.Spec.Completions) {
					jobCtx.finishedCondition = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes, "Job has failed indexes", now)
				}
			}
			jobCtx.podsWithDelayedDelete = podsWithDelayedDeletionPerIndex(jobCtx)
		}
		if jobCtx.finishedCondition == nil {
			if msg, met := matchSuccessPolicy(job.Spec.SuccessPolicy, *job.Spec.Completions, jobCtx.succeededIndexes); met {
				jobCtx.finishedCondition = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonSuccessPolicy, msg, now)
			}
		}
	}

	suspendCondChanged := false
	var manageErr error
	if jobCtx.finishedCondition != nil {
		// A finishing Job stops its pods; their finalizers stay until counted.
		deletedReady, deleted, err := c.deleteActivePods(ctx, job, jobCtx.activePods)
		if deleted != active || !satisfied {
			// Pods may remain, or not be in the cache yet: not finished yet.
			jobCtx.finishedCondition = nil
		}
		active -= deleted
		jobCtx.terminating += deleted
		jobCtx.ready -= deletedReady
		manageErr = err
	} else {
		manageCalled := false
		if satisfied && job.DeletionTimestamp == nil {
			active, manageErr = c.manageJob(ctx, job, key, jobCtx, now)
			manageCalled = true
		}
		complete := false
		if job.Spec.Completions == nil {
			// A work queue is done when a pod succeeded and none runs any more.
			complete = jobCtx.succeeded > 0 && active == 0
		} else {
			complete = jobCtx.succeeded >= *job.Spec.Completions && active == 0
		}
		switch {
		case complete:
			jobCtx.finishedCondition = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
		case manageCalled && suspended(job):
			var changed bool
			if job.Status.Conditions, changed = ensureCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended", now); changed {
				suspendCondChanged = true
				c.recorder.Event(job, corev1.EventTypeNormal, "Suspended", "Job suspended")
			}
		case manageCalled:
			var changed bool
			if job.Status.Conditions, changed = ensureCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now); changed {
				suspendCondChanged = true
				c.recorder.Event(job, corev1.EventTypeNormal, "Resumed", "Job resumed")
				// The active deadline counts from the resume, as for a Job created
				// suspended.
				job.Status.StartTime = &metav1.Time{Time: now}
			}
		}
	}

	needsStatusUpdate := suspendCondChanged || active != job.Status.Active || !ptr.Equal(&jobCtx.ready, job.Status.Ready) ||
		!ptr.Equal(job.Status.Terminating, &jobCtx.terminating)
	job.Status.Active = active
	job.Status.Ready = ptr.To(jobCtx.ready)
	job.Status.Terminating = ptr.To(jobCtx.terminating)
	if err := c.trackJobStatusAndRemoveFinalizers(ctx, key, jobCtx, needsStatusUpdate || !reflect.DeepEqual(job.Status.StartTime, shared.Status.StartTime)); err != nil {
		return fmt.Errorf("tracking status: %w", err)
	}
	return manageErr
}

func suspended(job *batchv1.Job) bool { return ptr.Deref(job.Spec.Suspend, false) }

// podsFor claims the Job's pods, finished ones included: orphans its selector matches
// are adopted (with the tracking finalizer), its pods that stopped matching are
// released. Mirrors getPodsForJob.
func (c *Controller) podsFor(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("couldn't convert Job selector: %w", err)
	}
	all, err := c.podLister.Pods(job.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &controllerref.Manager{
		Controller: job, Kind: controllerKind, Selector: selector,
		CanAdopt: controllerref.RecheckDeletionTimestamp(job.UID, func(ctx context.Context) (metav1.Object, error) {
			return c.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		}),
		Patch: func(ctx context.Context, ns, n string, patch []byte) error {
			_, err := c.client.CoreV1().Pods(ns).Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
		Finalizers: []string{batchv1.JobTrackingFinalizer},
	}
	pods, err := controllerref.Claim(ctx, m, all)
	// The cache does not show an adoption's finalizer yet: count as if it did.
	for i, p := range pods {
		if ref := metav1.GetControllerOf(p); (ref == nil || ref.UID != job.UID) && !hasJobTrackingFinalizer(p) {
			pods[i] = p.DeepCopy()
			pods[i].Finalizers = append(pods[i].Finalizers, batchv1.JobTrackingFinalizer)
		}
	}
	return pods, err
}

// newFinishedPods returns the succeeded and failed pods not yet counted: with the
// finalizer, not in uncountedTerminatedPods, not awaiting finalizer removal and, for
// an Indexed Job, with a valid index.
func newFinishedPods(jobCtx *syncJobCtx) (succeeded, failed []*corev1.Pod) {
	succeeded = validPodsWithFilter(jobCtx, jobCtx.uncountedSucceeded, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	failed = validPodsWithFilter(jobCtx, jobCtx.uncountedFailed, func(p *corev1.Pod) bool { return isPodFailed(p, jobCtx.job) })
	return succeeded, failed
}

func validPodsWithFilter(jobCtx *syncJobCtx, uncounted sets.Set[types.UID], filter func(*corev1.Pod) bool) []*corev1.Pod {
	var result []*corev1.Pod
	for _, p := range jobCtx.pods {
		if !hasJobTrackingFinalizer(p) || uncounted.Has(p.UID) || jobCtx.expectedRmFinalizers.Has(p.UID) {
			continue
		}
		if isIndexedJob(jobCtx.job) {
			if _, ok := validIndex(jobCtx.job, p); !ok {
				continue
			}
		}
		if filter(p) {
			result = append(result, p)
		}
	}
	return result
}

// nonIgnoredFailedCount is how many of the failed pods count towards backoffLimit.
func nonIgnoredFailedCount(job *batchv1.Job, failed []*corev1.Pod) int32 {
	n := int32(len(failed))
	if job.Spec.PodFailurePolicy != nil {
		for _, p := range failed {
			if _, count, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p); !count {
				n--
			}
		}
	}
	return n
}

// failJobMessage is the message of the first failed pod that matches a FailJob rule.
func failJobMessage(job *batchv1.Job, pods []*corev1.Pod) *string {
	if job.Spec.PodFailurePolicy == nil {
		return nil
	}
	for _, p := range pods {
		if isPodFailed(p, job) {
			if msg, _, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p); msg != nil {
				return msg
			}
		}
	}
	return nil
}

// pastBackoffLimitOnFailure: for restartPolicy OnFailure, the container restarts of the
// pending and running pods reach backoffLimit (any restart when it is 0). Mirrors
// pastBackoffLimitOnFailure.
func pastBackoffLimitOnFailure(job *batchv1.Job, pods []*corev1.Pod) bool {
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending {
			for _, s := range p.Status.InitContainerStatuses {
				restarts += s.RestartCount
			}
			for _, s := range p.Status.ContainerStatuses {
				restarts += s.RestartCount
			}
		}
	}
	if *job.Spec.BackoffLimit == 0 {
		return restarts > 0
	}
	return restarts >= *job.Spec.BackoffLimit
}

// pastActiveDeadline: not suspended and active longer than activeDeadlineSeconds.
func (c *Controller) pastActiveDeadline(job *batchv1.Job, now time.Time) bool {
	d := job.Spec.ActiveDeadlineSeconds
	if d == nil || job.Status.StartTime == nil || suspended(job) {
		return false
	}
	return now.Sub(job.Status.StartTime.Time) >= time.Duration(*d)*time.Second
}

// manageJob creates or deletes pods so that the wanted number run: none while
// suspended; else parallelism, at most the completions still missing, or — for a Job
// without completions that had a success — no new ones. New pods wait out the failure
// back-off; an Indexed Job creates pods for the lowest pending indexes and deletes
// duplicates of an index first. It returns the active count afterwards. Mirrors
// manageJob.
func (c *Controller) manageJob(ctx context.Context, job *batchv1.Job, key string, jobCtx *syncJobCtx, now time.Time) (int32, error) {
	active := int32(len(jobCtx.activePods))
	parallelism := *job.Spec.Parallelism
	if suspended(job) {
		toDelete := activePodsForRemoval(job, jobCtx.activePods, int(active))
		removedReady, removed, err := c.deleteJobPods(ctx, job, key, toDelete)
		jobCtx.terminating += removed
		jobCtx.ready -= removedReady
		return active - removed, err
	}
	var wantActive int32
	switch {
	case job.Spec.Completions == nil && jobCtx.succeeded > 0:
		wantActive = active
	case job.Spec.Completions == nil:
		wantActive = parallelism
	default:
		wantActive = max(min(*job.Spec.Completions-jobCtx.succeeded, parallelism), 0)
	}
	toDelete := activePodsForRemoval(job, jobCtx.activePods, int(max(active-wantActive, 0)))
	if len(toDelete) > maxPodCreateDeletePerSync {
		toDelete = toDelete[:maxPodCreateDeletePerSync]
	}
	if len(toDelete) > 0 {
		removedReady, removed, err := c.deleteJobPods(ctx, job, key, toDelete)
		jobCtx.terminating += removed
		jobCtx.ready -= removedReady
		// Deletions first; creations, if any are due too, in a later sync.
		return active - removed, err
	}
	var terminating int32
	if onlyReplaceFailedPods(job) {
		terminating = jobCtx.terminating
	}
	diff := wantActive - terminating - active
	if diff <= 0 {
		return active, nil
	}
	if !hasBackoffLimitPerIndex(job) {
		r := jobCtx.newBackoffRecord
		if wait := remainingBackoff(now, c.PodFailureBackoff, c.MaxPodFailureBackoff, r.failuresAfterLastSuccess, r.lastFailureTime); wait > 0 {
			c.queue.AddAfter(key, wait)
			return active, nil
		}
	}
	diff = min(diff, maxPodCreateDeletePerSync)
	var indexes []int
	if isIndexedJob(job) {
		indexes = firstPendingIndexes(jobCtx, int(diff), int(*job.Spec.Completions))
		if hasBackoffLimitPerIndex(job) {
			var wait time.Duration
			if indexes, wait = c.indexesReadyForCreation(job, indexes, jobCtx.podsWithDelayedDelete, now); wait > 0 {
				c.queue.AddAfter(key, wait)
				return active, nil
			}
		}
		diff = int32(len(indexes))
		if diff == 0 {
			return active, nil
		}
	}

	template := job.Spec.Template.DeepCopy()
	if isIndexedJob(job) {
		addCompletionIndexEnvVariables(template)
	}
	if !sets.New(template.Finalizers...).Has(batchv1.JobTrackingFinalizer) {
		template.Finalizers = append(template.Finalizers, batchv1.JobTrackingFinalizer)
	}
	ref := controllerref.NewControllerRef(job, controllerKind)
	c.expectations.ExpectCreations(key, int(diff))
	var next atomic.Int32
	successes, err := podcontrol.SlowStartBatch(int(diff), podcontrol.SlowStartInitialBatchSize, func() error {
		pod := podcontrol.PodFromTemplate(template, job.Name, ref)
		if indexes != nil {
			ix := indexes[next.Add(1)-1]
			t := template.DeepCopy()
			setCompletionIndex(t, job.Name, ix)
			if hasBackoffLimitPerIndex(job) {
				failed, ignored := newIndexFailureCounts(job, jobCtx.podsWithDelayedDelete[ix])
				t.Annotations[batchv1.JobIndexFailureCountAnnotation] = fmt.Sprint(failed)
				if ignored > 0 {
					t.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = fmt.Sprint(ignored)
				}
			}
			pod = podcontrol.PodFromTemplate(t, job.Name, ref)
			pod.GenerateName = podGenerateNameWithIndex(job.Name, ix)
		}
		_, err := c.podControl.CreatePod(ctx, job.Namespace, pod, job)
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		return err
	})
	for i := successes; i < int(diff); i++ {
		c.expectations.CreationObserved(key)
	}
	return active + int32(successes), err
}

// indexesReadyForCreation keeps the indexes whose per-index back-off has passed; when
// none has, it returns the shortest wait.
func (c *Controller) indexesReadyForCreation(job *batchv1.Job, indexes []int, lastFailed map[int]*corev1.Pod, now time.Time) ([]int, time.Duration) {
	var ready []int
	var shortest time.Duration
	for _, ix := range indexes {
		wait := time.Duration(0)
		if p := lastFailed[ix]; p != nil {
			finished := getFinishedTime(p)
			wait = remainingBackoff(now, c.PodFailureBackoff, c.MaxPodFailureBackoff, absoluteIndexFailureCount(p)+1, &finished)
		}
		if wait == 0 {
			ready = append(ready, ix)
		} else if shortest == 0 || wait < shortest {
			shortest = wait
		}
	}
	if len(ready) > 0 {
		return ready, 0
	}
	return nil, shortest
}

// activePodsForRemoval picks rmAtLeast pods to delete (more for an Indexed Job with
// pods of repeated or invalid indexes), those in the earliest stage first.
func activePodsForRemoval(job *batchv1.Job, pods []*corev1.Pod, rmAtLeast int) []*corev1.Pod {
	var rm, left []*corev1.Pod
	if isIndexedJob(job) {
		rm, left = duplicatedIndexPodsForRemoval(pods, int(*job.Spec.Completions))
	} else {
		left = append(left, pods...)
	}
	if len(rm) < rmAtLeast {
		sort.Sort(podcontrol.RankedForDeletion{Pods: left, Ranks: make([]int, len(left)), Now: time.Now()})
		rm = append(rm, left[:rmAtLeast-len(rm)]...)
	}
	return rm
}

// deleteActivePods deletes pods of a finishing Job, keeping their finalizers so they
// are counted. It returns how many ready pods and how many pods went.
func (c *Controller) deleteActivePods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (int32, int32, error) {
	return c.deletePods(ctx, job, "", pods, false)
}

// deleteJobPods removes the finalizer of each pod, then deletes it; surplus pods are
// not counted. The deletions are expected.
func (c *Controller) deleteJobPods(ctx context.Context, job *batchv1.Job, key string, pods []*corev1.Pod) (int32, int32, error) {
	return c.deletePods(ctx, job, key, pods, true)
}

func (c *Controller) deletePods(ctx context.Context, job *batchv1.Job, key string, pods []*corev1.Pod, removeFinalizer bool) (int32, int32, error) {
	if len(pods) == 0 {
		return 0, 0, nil
	}
	if key != "" {
		keys := make([]string, len(pods))
		for i, p := range pods {
			keys[i] = podcontrol.Key(p)
		}
		c.expectations.ExpectDeletions(key, keys)
	}
	var wg sync.WaitGroup
	var deleted, deletedReady atomic.Int32
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				if key != "" {
					c.expectations.DeletionObserved(key, podcontrol.Key(p))
				}
				if !apierrors.IsNotFound(err) {
					errs[i] = err
				}
			}
			if patch := removeTrackingFinalizerPatch(p); removeFinalizer && patch != nil {
				if _, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
					fail(fmt.Errorf("removing completion finalizer: %w", err))
					if !apierrors.IsNotFound(err) {
						return
					}
				}
			}
			if err := c.podControl.DeletePod(ctx, p, job); err != nil {
				fail(err)
				if !apierrors.IsNotFound(err) {
					return
				}
			}
			deleted.Add(1)
			if podcontrol.IsReady(p) {
				deletedReady.Add(1)
			}
		}()
	}
	wg.Wait()
	return deletedReady.Load(), deleted.Load(), errors.Join(errs...)
}

// trackJobStatusAndRemoveFinalizers counts finished pods in four steps: add them to
// status.uncountedTerminatedPods (for an Indexed Job, succeeded ones go straight to
// completedIndexes) and write the status with any interim FailureTarget or
// SuccessCriteriaMet condition; remove their finalizers; move the pods whose finalizer
// is gone into the succeeded and failed counters; and once nothing is left uncounted
// or terminating, set Failed or Complete. Mirrors trackJobStatusAndRemoveFinalizers.
func (c *Controller) trackJobStatusAndRemoveFinalizers(ctx context.Context, key string, jobCtx *syncJobCtx, needsFlush bool) error {
	job := jobCtx.job
	indexed := isIndexedJob(job)
	if indexed {
		sort.Stable(byCompletionIndex(jobCtx.pods))
	}
	uidsWithFinalizer := sets.New[types.UID]()
	for _, p := range jobCtx.pods {
		if hasJobTrackingFinalizer(p) && !jobCtx.expectedRmFinalizers.Has(p.UID) {
			uidsWithFinalizer.Insert(p.UID)
		}
	}
	if cleanUncountedPodsWithoutFinalizers(&job.Status, uidsWithFinalizer) {
		needsFlush = true
	}
	uncounted := job.Status.UncountedTerminatedPods
	var toRemoveFinalizer []*corev1.Pod
	var newSucceededIndexes []int
	reachedMax := false
	for _, p := range jobCtx.pods {
		if !hasJobTrackingFinalizer(p) || jobCtx.expectedRmFinalizers.Has(p.UID) {
			continue
		}
		failed := isPodFailed(p, job)
		if !canRemoveFinalizer(jobCtx, p, failed) {
			continue
		}
		toRemoveFinalizer = append(toRemoveFinalizer, p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !jobCtx.uncountedFailed.Has(p.UID):
			if indexed {
				if ix, ok := validIndex(job, p); ok && !jobCtx.prevSucceededIndexes.has(ix) {
					newSucceededIndexes = append(newSucceededIndexes, ix)
					needsFlush = true
				}
			} else if !jobCtx.uncountedSucceeded.Has(p.UID) {
				uncounted.Succeeded = append(uncounted.Succeeded, p.UID)
				needsFlush = true
			}
		case failed || (jobCtx.finishedCondition != nil && jobCtx.finishedCondition.Type != batchv1.JobSuccessCriteriaMet):
			// A pod of a failing Job that has not finished counts as failed.
			_, validIx := validIndex(job, p)
			if jobCtx.uncountedFailed.Has(p.UID) || (indexed && !validIx) {
				break
			}
			count := true
			if job.Spec.PodFailurePolicy != nil {
				_, count, _ = matchPodFailurePolicy(job.Spec.PodFailurePolicy, p)
			}
			if count {
				uncounted.Failed = append(uncounted.Failed, p.UID)
				needsFlush = true
			}
		}
		if len(newSucceededIndexes)+len(uncounted.Succeeded)+len(uncounted.Failed) >= MaxUncountedPods {
			// Enough for one sync; the status write brings the Job back.
			reachedMax = true
			break
		}
	}
	if indexed {
		jobCtx.succeededIndexes = jobCtx.succeededIndexes.withOrderedIndexes(newSucceededIndexes)
		if s := jobCtx.succeededIndexes.String(); s != job.Status.CompletedIndexes {
			job.Status.CompletedIndexes = s
			needsFlush = true
		}
		job.Status.Succeeded = int32(jobCtx.succeededIndexes.total())
		var failedIndexes *string
		if jobCtx.failedIndexes != nil {
			failedIndexes = ptr.To(jobCtx.failedIndexes.String())
		}
		if !ptr.Equal(job.Status.FailedIndexes, failedIndexes) {
			job.Status.FailedIndexes = failedIndexes
			needsFlush = true
		}
	}
	// The interim condition is written before any finalizer goes, then turned into
	// the final one.
	if fc := jobCtx.finishedCondition; fc != nil && fc.Type == batchv1.JobFailureTarget {
		job.Status.Conditions = append(job.Status.Conditions, *fc)
		needsFlush = true
		jobCtx.finishedCondition = newCondition(batchv1.JobFailed, fc.Reason, fc.Message, c.now())
	}
	if fc := jobCtx.finishedCondition; fc != nil && fc.Type == batchv1.JobSuccessCriteriaMet {
		if !hasCondition(job, batchv1.JobSuccessCriteriaMet) {
			job.Status.Conditions = append(job.Status.Conditions, *fc)
			needsFlush = true
		}
		jobCtx.finishedCondition = newCondition(batchv1.JobComplete, fc.Reason, fc.Message, c.now())
	}

	// 1. Flush the uncounted pods, 2. remove finalizers, 3. count.
	if needsFlush {
		updated, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("adding uncounted pods to status: %w", err)
		}
		jobCtx.job, job = updated, updated
		c.backoff.update(key, jobCtx.newBackoffRecord)
		needsFlush = false
	}
	var rmErr error
	if len(toRemoveFinalizer) > 0 {
		var removed []bool
		removed, rmErr = c.removeTrackingFinalizers(ctx, key, toRemoveFinalizer)
		for i, p := range toRemoveFinalizer {
			if removed[i] {
				uidsWithFinalizer.Delete(p.UID)
			}
		}
	}
	if job.Status.UncountedTerminatedPods == nil {
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	if cleanUncountedPodsWithoutFinalizers(&job.Status, uidsWithFinalizer) {
		needsFlush = true
	}
	if rmErr != nil {
		if needsFlush {
			if _, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("removing uncounted pods from status: %w", err)
			}
		}
		return rmErr
	}

	// 4. Finish.
	finished := !reachedMax && c.enactJobFinished(jobCtx)
	if finished || needsFlush {
		if _, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("removing uncounted pods from status: %w", err)
		}
		if finished {
			c.recordJobFinished(job, jobCtx.finishedCondition)
		}
	}
	return nil
}

// canRemoveFinalizer: the Job is being deleted or finishing, or the pod succeeded, or
// it failed and is not the last failed pod of an index awaiting its replacement.
func canRemoveFinalizer(jobCtx *syncJobCtx, p *corev1.Pod, failed bool) bool {
	if jobCtx.job.DeletionTimestamp != nil || jobCtx.finishedCondition != nil || p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if !failed {
		return false
	}
	if hasBackoffLimitPerIndex(jobCtx.job) {
		if ix := getCompletionIndex(p.Annotations); ix != unknownCompletionIndex {
			if delayed, ok := jobCtx.podsWithDelayedDelete[ix]; ok && delayed.UID == p.UID {
				return false
			}
		}
	}
	return true
}

// cleanUncountedPodsWithoutFinalizers moves the uncounted pods whose finalizer is gone
// into the succeeded and failed counters; it reports whether anything moved.
func cleanUncountedPodsWithoutFinalizers(status *batchv1.JobStatus, withFinalizer sets.Set[types.UID]) bool {
	u := status.UncountedTerminatedPods
	keep := func(uids []types.UID) []types.UID {
		var out []types.UID
		for _, uid := range uids {
			if withFinalizer.Has(uid) {
				out = append(out, uid)
			}
		}
		return out
	}
	updated := false
	if left := keep(u.Succeeded); len(left) != len(u.Succeeded) {
		status.Succeeded += int32(len(u.Succeeded) - len(left))
		u.Succeeded = left
		updated = true
	}
	if left := keep(u.Failed); len(left) != len(u.Failed) {
		status.Failed += int32(len(u.Failed) - len(left))
		u.Failed = left
		updated = true
	}
	return updated
}

// removeTrackingFinalizers patches the finalizer off each pod in parallel; removed[i]
// is true when pod i no longer has it (or is gone).
func (c *Controller) removeTrackingFinalizers(ctx context.Context, key string, pods []*corev1.Pod) ([]bool, error) {
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	c.finalizers.expectRemoved(key, uids)
	removed := make([]bool, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			patch := removeTrackingFinalizerPatch(p)
			if patch == nil {
				return
			}
			if _, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
				// No update will show the removal: stop expecting it.
				c.finalizers.observed(key, p.UID)
				if !apierrors.IsNotFound(err) {
					errs[i] = fmt.Errorf("removing tracking finalizer: %w", err)
					return
				}
			}
			removed[i] = true
		}()
	}
	wg.Wait()
	return removed, errors.Join(errs...)
}

// enactJobFinished sets the final Complete or Failed condition once no pod is left
// uncounted or terminating; Complete gets completionTime. Mirrors enactJobFinished.
func (c *Controller) enactJobFinished(jobCtx *syncJobCtx) bool {
	fc := jobCtx.finishedCondition
	if fc == nil {
		return false
	}
	job := jobCtx.job
	if u := job.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		return false
	}
	if jobCtx.terminating > 0 {
		return false
	}
	job.Status.Conditions, _ = ensureCondition(job.Status.Conditions, fc.Type, fc.Status, fc.Reason, fc.Message, c.now())
	if fc.Type == batchv1.JobComplete {
		job.Status.CompletionTime = &fc.LastTransitionTime
	}
	return true
}

// recordJobFinished records Completed (and TooManySucceededPods) or the failure reason.
func (c *Controller) recordJobFinished(job *batchv1.Job, fc *batchv1.JobCondition) {
	if fc.Type == batchv1.JobComplete {
		if job.Spec.Completions != nil && job.Status.Succeeded > *job.Spec.Completions {
			c.recorder.Event(job, corev1.EventTypeWarning, "TooManySucceededPods", "Too many succeeded pods running after completion count reached")
		}
		c.recorder.Event(job, corev1.EventTypeNormal, "Completed", "Job completed")
		return
	}
	c.recorder.Event(job, corev1.EventTypeWarning, fc.Reason, fc.Message)
}

func newCondition(t batchv1.JobConditionType, reason, message string, now time.Time) *batchv1.JobCondition {
	return &batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// ensureCondition sets condition t to status, reason and message, adding it unless it
// would be added False. Reports whether the list changed. Mirrors
// ensureJobConditionStatus.
func ensureCondition(list []batchv1.JobCondition, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) ([]batchv1.JobCondition, bool) {
	cond := &batchv1.JobCondition{Type: t, Status: status, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	if c := findCondition(list, t); c != nil {
		if c.Status != status || c.Reason != reason || c.Message != message {
			*c = *cond
			return list, true
		}
		return list, false
	}
	if status != corev1.ConditionFalse {
		return append(list, *cond), true
	}
	return list, false
}
