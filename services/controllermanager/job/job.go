// Package job is kube-controller-manager's Job controller: it runs a Job's pods to
// completion — up to parallelism at once until completions pods have succeeded —
// replaces failed pods after an exponential back-off, fails the Job once backoffLimit is
// exceeded (failed pods for restartPolicy Never, container restarts for OnFailure) or
// activeDeadlineSeconds has passed, honours suspend, and writes status (active, ready,
// succeeded, failed, startTime, completionTime, the Complete/Failed conditions with
// SuccessCriteriaMet/FailureTarget before them). Mirrors
// k8s.io/kubernetes/pkg/controller/job for NonIndexed Jobs.
//
// Counting is from the Job's pods, as kube did before the job-tracking finalizer:
// succeeded and failed never decrease, so a finished pod deleted by someone else is not
// run again, but a pod deleted before the controller saw it finish is not counted.
package job

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	queue        workqueue.TypedRateLimitingInterface[string]
	log          *slog.Logger

	mu       sync.Mutex
	failures map[string]failureRecord // by job key: the back-off state
}

// failureRecord is the failed-pod count last seen for a Job and when it last grew.
type failureRecord struct {
	failed int32
	last   time.Time
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
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job"}),
		log:      slog.With("controller", Name),
		failures: map[string]failureRecord{},
	}
	_, _ = jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
		DeleteFunc: func(obj interface{}) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.expectations.Delete(key)
				c.mu.Lock()
				delete(c.failures, key)
				c.mu.Unlock()
			}
		},
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if key := c.ownerKey(obj.(*corev1.Pod)); key != "" {
				c.expectations.CreationObserved(key)
				c.queue.Add(key)
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
			if oldPod.ResourceVersion == curPod.ResourceVersion {
				return
			}
			if key := c.ownerKey(curPod); key != "" {
				c.queue.Add(key)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if key := c.ownerKey(pod); key != "" {
				c.expectations.DeletionObserved(key, podcontrol.Key(pod))
				c.queue.Add(key)
			}
		},
	})
	return c
}

// ownerKey is the key of the Job controlling pod, or "".
func (c *Controller) ownerKey(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return ""
	}
	job, err := c.jobLister.Jobs(pod.Namespace).Get(ref.Name)
	if err != nil || job.UID != ref.UID {
		return ""
	}
	return job.Namespace + "/" + job.Name
}

// Run waits for the informers' caches, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "job", c.queue, c.synced, workers, c.log, c.syncJob)
}

func (c *Controller) enqueue(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// IsFinished reports whether the Job has a Complete or Failed condition that is True.
func IsFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// syncJob runs one Job a step further and writes its status. Mirrors
// JobController.syncJob.
func (c *Controller) syncJob(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.jobLister.Jobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	if IsFinished(cached) || cached.DeletionTimestamp != nil {
		return nil
	}
	job := cached.DeepCopy()
	now := time.Now()
	satisfied := c.expectations.Satisfied(key)
	pods, err := c.podsFor(ctx, job)
	if err != nil {
		return err
	}
	var active []*corev1.Pod
	var succeeded, failed, ready int32
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		case p.Status.Phase == corev1.PodFailed:
			failed++
		case p.DeletionTimestamp == nil:
			active = append(active, p)
			if podcontrol.IsReady(p) {
				ready++
			}
		}
	}
	succeeded = max(succeeded, job.Status.Succeeded)
	failed = max(failed, job.Status.Failed)
	suspended := ptr.Deref(job.Spec.Suspend, false)

	status := job.Status.DeepCopy()
	if suspended {
		if setCondition(status, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended", now) {
			c.recorder.Event(job, corev1.EventTypeNormal, "Suspended", "Job suspended")
		}
	} else {
		if setCondition(status, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now) {
			// A resumed Job's deadline counts from the resume, as kube's does.
			status.StartTime = &metav1.Time{Time: now}
			c.recorder.Event(job, corev1.EventTypeNormal, "Resumed", "Job resumed")
		}
		if status.StartTime == nil {
			status.StartTime = &metav1.Time{Time: now}
		}
	}

	failReason, failMessage := "", ""
	switch {
	case exceedsBackoffLimit(job, active, failed):
		failReason, failMessage = batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
	case !suspended && pastActiveDeadline(job, status.StartTime, now):
		failReason, failMessage = batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"
	}
	complete := false
	if failReason == "" {
		if job.Spec.Completions != nil {
			complete = succeeded >= *job.Spec.Completions
		} else {
			complete = succeeded > 0 && len(active) == 0
		}
	}

	var manageErr error
	activeCount := int32(len(active))
	switch {
	case failReason != "" || complete:
		// A finished Job leaves no pod running.
		deleted, err := c.deletePods(ctx, job, key, active)
		manageErr = err
		activeCount -= deleted
		if failReason != "" {
			failed += deleted
		}
	case satisfied:
		activeCount, manageErr = c.manageJob(ctx, job, key, active, succeeded, failed, suspended, now)
	}

	status.Active, status.Ready, status.Succeeded, status.Failed = activeCount, &ready, succeeded, failed
	switch {
	case failReason != "" && activeCount == 0:
		setCondition(status, batchv1.JobFailureTarget, corev1.ConditionTrue, failReason, failMessage, now)
		setCondition(status, batchv1.JobFailed, corev1.ConditionTrue, failReason, failMessage, now)
		c.recorder.Event(job, corev1.EventTypeWarning, failReason, failMessage)
	case complete && activeCount == 0:
		setCondition(status, batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
		setCondition(status, batchv1.JobComplete, corev1.ConditionTrue, "", "", now)
		status.CompletionTime = &metav1.Time{Time: now}
		c.recorder.Event(job, corev1.EventTypeNormal, "Completed", "Job completed")
	}
	if !apiequality.Semantic.DeepEqual(&job.Status, status) {
		job.Status = *status
		if _, err := c.client.BatchV1().Jobs(namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if manageErr != nil {
		return manageErr
	}
	if d := job.Spec.ActiveDeadlineSeconds; d != nil && !IsFinished(job) && status.StartTime != nil && !suspended {
		c.queue.AddAfter(key, status.StartTime.Add(time.Duration(*d)*time.Second).Sub(now)+10*time.Millisecond)
	}
	return nil
}

// podsFor claims the Job's pods, finished ones included.
func (c *Controller) podsFor(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, nil
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
	}
	return controllerref.Claim(ctx, m, all)
}

// exceedsBackoffLimit: for restartPolicy OnFailure, the active pods' container restarts
// plus failed pods reach backoffLimit; for Never, more pods failed than backoffLimit.
// Mirrors pastBackoffLimitOnFailure and the failed > backoffLimit test of syncJob.
func exceedsBackoffLimit(job *batchv1.Job, active []*corev1.Pod, failed int32) bool {
	limit := ptr.Deref(job.Spec.BackoffLimit, 6)
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return failed > limit
	}
	restarts := failed
	for _, p := range active {
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			restarts += s.RestartCount
		}
	}
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// pastActiveDeadline: the Job has run longer than activeDeadlineSeconds.
func pastActiveDeadline(job *batchv1.Job, start *metav1.Time, now time.Time) bool {
	d := job.Spec.ActiveDeadlineSeconds
	return d != nil && start != nil && !now.Before(start.Add(time.Duration(*d)*time.Second))
}

// manageJob creates or deletes pods so that min(parallelism, completions-succeeded) run
// (none while suspended, none new once a Job without completions had a success), new
// ones only after the failure back-off. It returns the active count afterwards.
// Mirrors manageJob.
func (c *Controller) manageJob(ctx context.Context, job *batchv1.Job, key string, active []*corev1.Pod, succeeded, failed int32, suspended bool, now time.Time) (int32, error) {
	activeCount := int32(len(active))
	want := ptr.Deref(job.Spec.Parallelism, 1)
	switch {
	case suspended:
		want = 0
	case job.Spec.Completions != nil:
		want = min(want, *job.Spec.Completions-succeeded)
	case succeeded > 0:
		want = min(want, activeCount)
	}
	want = max(want, 0)
	if activeCount > want {
		victims := append([]*corev1.Pod(nil), active...)
		sort.Sort(podcontrol.RankedForDeletion{Pods: victims, Ranks: make([]int, len(victims)), Now: now})
		deleted, err := c.deletePods(ctx, job, key, victims[:min(activeCount-want, maxPodCreateDeletePerSync)])
		return activeCount - deleted, err
	}
	diff := min(want-activeCount, maxPodCreateDeletePerSync)
	if diff <= 0 {
		return activeCount, nil
	}
	if wait := c.backoffRemaining(key, failed, now); wait > 0 {
		c.queue.AddAfter(key, wait)
		return activeCount, nil
	}
	c.expectations.ExpectCreations(key, int(diff))
	ref := controllerref.NewControllerRef(job, controllerKind)
	successes, err := podcontrol.SlowStartBatch(int(diff), podcontrol.SlowStartInitialBatchSize, func() error {
		_, err := c.podControl.CreatePod(ctx, job.Namespace, podcontrol.PodFromTemplate(&job.Spec.Template, job.Name, ref), job)
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		return err
	})
	for i := successes; i < int(diff); i++ {
		c.expectations.CreationObserved(key)
	}
	return activeCount + int32(successes), err
}

// backoffRemaining is how long the Job must still wait before replacing a failed pod:
// PodFailureBackoff × 2^(failures-1), capped, from when the failure count last grew.
func (c *Controller) backoffRemaining(key string, failed int32, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.failures[key]
	if failed > r.failed {
		r = failureRecord{failed: failed, last: now}
		c.failures[key] = r
	}
	if failed == 0 {
		return 0
	}
	delay := c.PodFailureBackoff
	for i := int32(1); i < failed && delay < c.MaxPodFailureBackoff; i++ {
		delay *= 2
	}
	delay = min(delay, c.MaxPodFailureBackoff)
	return r.last.Add(delay).Sub(now)
}

// deletePods deletes pods in parallel and returns how many went.
func (c *Controller) deletePods(ctx context.Context, job *batchv1.Job, key string, pods []*corev1.Pod) (int32, error) {
	if len(pods) == 0 {
		return 0, nil
	}
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = podcontrol.Key(p)
	}
	c.expectations.ExpectDeletions(key, keys)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var deleted int32
	var firstErr error
	for _, p := range pods {
		wg.Add(1)
		go func(p *corev1.Pod) {
			defer wg.Done()
			err := c.podControl.DeletePod(ctx, p, job)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !apierrors.IsNotFound(err) {
				c.expectations.DeletionObserved(key, podcontrol.Key(p))
				if firstErr == nil {
					firstErr = fmt.Errorf("delete pod %s: %w", p.Name, err)
				}
				return
			}
			deleted++
		}(p)
	}
	wg.Wait()
	return deleted, firstErr
}

// setCondition sets condition t to status, keeping the transition time when status is
// unchanged. An absent condition set to False is not added (kube adds JobResumed only
// after a suspension). Reports whether the status changed.
func setCondition(status *batchv1.JobStatus, t batchv1.JobConditionType, s corev1.ConditionStatus, reason, message string, now time.Time) bool {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status == s {
			return false
		}
		*c = batchv1.JobCondition{Type: t, Status: s, Reason: reason, Message: message,
			LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
		return true
	}
	if s == corev1.ConditionFalse {
		return false
	}
	status.Conditions = append(status.Conditions, batchv1.JobCondition{Type: t, Status: s, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)})
	return true
}
