// Package cronjob is kube-controller-manager's CronJob controller: at each time the
// schedule names (in spec.timeZone) it creates a Job from spec.jobTemplate named
// <cronjob>-<scheduled time in minutes>, honouring suspend, startingDeadlineSeconds and
// concurrencyPolicy (Allow, Forbid, Replace); it keeps status.active,
// lastScheduleTime and lastSuccessfulTime, and deletes finished Jobs beyond
// successfulJobsHistoryLimit and failedJobsHistoryLimit. Mirrors
// k8s.io/kubernetes/pkg/controller/cronjob (the v2 controller).
package cronjob

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/controllerref"
	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "cronjob-controller"

// ScheduledTimestampAnnotation records on each Job the time it was scheduled for.
const ScheduledTimestampAnnotation = "batch.kubernetes.io/cronjob-scheduled-timestamp"

// maxMissedSchedules is how many missed times are walked before giving up on counting
// (kube warns TooManyMissedTimes past 100 and starts the most recent).
const maxMissedSchedules = 100

var controllerKind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Controller is the CronJob controller.
type Controller struct {
	// Clock tells the time schedules are checked against; the real clock unless set
	// (before Run) to another, e.g. a fake one in tests.
	Clock clock.PassiveClock

	client    kubernetes.Interface
	recorder  record.EventRecorder
	cjLister  batchlisters.CronJobLister
	jobLister batchlisters.JobLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger
}

// New builds the controller over the factory's CronJob and Job informers.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	cjInformer := factory.Batch().V1().CronJobs()
	jobInformer := factory.Batch().V1().Jobs()
	c := &Controller{
		client:    client,
		recorder:  recorder,
		cjLister:  cjInformer.Lister(),
		jobLister: jobInformer.Lister(),
		synced:    []cache.InformerSynced{cjInformer.Informer().HasSynced, jobInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cronjob"}),
		log:   slog.With("controller", Name),
		Clock: clock.RealClock{},
	}
	enqueue := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = cjInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	owner := func(obj interface{}) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOf(j); ref != nil && ref.Kind == controllerKind.Kind && ref.APIVersion == controllerKind.GroupVersion().String() {
			c.queue.Add(j.Namespace + "/" + ref.Name)
		}
	}
	_, _ = jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    owner,
		UpdateFunc: func(_, obj interface{}) { owner(obj) },
		DeleteFunc: owner,
	})
	return c
}

// Run waits for the informers' caches, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "cronjob", c.queue, c.synced, workers, c.log, func(ctx context.Context, key string) error {
		requeueAfter, err := c.sync(ctx, key)
		if err == nil && requeueAfter != nil {
			return &worker.Requeue{After: *requeueAfter}
		}
		return err
	})
}

// jobFinished returns the Job's Complete or Failed condition type, or "".
func jobFinished(j *batchv1.Job) batchv1.JobConditionType {
	for _, cond := range j.Status.Conditions {
		if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
			return cond.Type
		}
	}
	return ""
}

// sync brings one CronJob up to date and says when its next schedule time is due.
// Mirrors ControllerV2.sync and syncCronJob.
func (c *Controller) sync(ctx context.Context, key string) (*time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, nil
	}
	cached, err := c.cjLister.CronJobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cj := cached.DeepCopy()
	jobs, err := c.jobsFor(cj)
	if err != nil {
		return nil, err
	}
	now := c.Clock.Now()
	status := cj.Status.DeepCopy()
	c.reconcileActive(cj, status, jobs)
	requeue, err := c.schedule(ctx, cj, status, now)
	if err == nil {
		err = c.cleanupFinishedJobs(ctx, cj, jobs)
	}
	if !apiequality.Semantic.DeepEqual(&cj.Status, status) {
		cj.Status = *status
		if _, uerr := c.client.BatchV1().CronJobs(namespace).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); uerr != nil && err == nil {
			err = uerr
		}
	}
	return requeue, err
}

// jobsFor lists the Jobs this CronJob controls.
func (c *Controller) jobsFor(cj *batchv1.CronJob) ([]*batchv1.Job, error) {
	all, err := c.jobLister.Jobs(cj.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*batchv1.Job
	for _, j := range all {
		if ref := metav1.GetControllerOf(j); ref != nil && ref.UID == cj.UID {
			out = append(out, j)
		}
	}
	return out, nil
}

// reconcileActive makes status.active the controlled Jobs still running, and moves
// lastSuccessfulTime forward for those that completed.
func (c *Controller) reconcileActive(cj *batchv1.CronJob, status *batchv1.CronJobStatus, jobs []*batchv1.Job) {
	byUID := map[string]*batchv1.Job{}
	for _, j := range jobs {
		byUID[string(j.UID)] = j
	}
	var active []corev1.ObjectReference
	seen := map[string]bool{}
	for _, ref := range status.Active {
		j, ok := byUID[string(ref.UID)]
		if !ok {
			continue // deleted
		}
		seen[string(ref.UID)] = true
		switch jobFinished(j) {
		case batchv1.JobComplete:
			if t := j.Status.CompletionTime; t != nil && (status.LastSuccessfulTime == nil || status.LastSuccessfulTime.Before(t)) {
				status.LastSuccessfulTime = t.DeepCopy()
			}
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SawCompletedJob", "Saw completed job: %s, condition: %v", j.Name, batchv1.JobComplete)
		case batchv1.JobFailed:
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SawCompletedJob", "Saw completed job: %s, condition: %v", j.Name, batchv1.JobFailed)
		default:
			active = append(active, ref)
		}
	}
	for _, j := range jobs {
		if !seen[string(j.UID)] && jobFinished(j) == "" && j.DeletionTimestamp == nil {
			active = append(active, jobReference(j))
		}
	}
	sort.Slice(active, func(i, k int) bool { return active[i].Name < active[k].Name })
	status.Active = active
}

func jobReference(j *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Job", Namespace: j.Namespace, Name: j.Name, UID: j.UID,
		APIVersion: batchv1.SchemeGroupVersion.String(), ResourceVersion: j.ResourceVersion}
}

// schedule starts the Job of the most recent missed schedule time, if any is due and
// allowed, and returns how long until the next one.
func (c *Controller) schedule(ctx context.Context, cj *batchv1.CronJob, status *batchv1.CronJobStatus, now time.Time) (*time.Duration, error) {
	if cj.DeletionTimestamp != nil || ptr.Deref(cj.Spec.Suspend, false) {
		return nil, nil
	}
	spec := cj.Spec.Schedule
	if cj.Spec.TimeZone != nil {
		spec = "CRON_TZ=" + *cj.Spec.TimeZone + " " + spec
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnparseableSchedule", "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		return nil, nil
	}
	next := func() *time.Duration {
		d := sched.Next(now).Sub(now) + 100*time.Millisecond
		return &d
	}
	scheduled, missed := mostRecentScheduleTime(cj, status, now, sched)
	if scheduled == nil {
		return next(), nil
	}
	if missed > maxMissedSchedules {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "TooManyMissedTimes", "too many missed start times: %d. Set or decrease .spec.startingDeadlineSeconds or check clock skew", missed)
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil && scheduled.Add(time.Duration(*d)*time.Second).Before(now) {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "MissSchedule", "Missed scheduled time to start a job: %s", scheduled.UTC().Format(time.RFC1123Z))
		return next(), nil
	}
	jobName := fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix()/60)
	for _, ref := range status.Active {
		if ref.Name == jobName {
			return next(), nil
		}
	}
	if status.LastScheduleTime != nil && !status.LastScheduleTime.Time.Before(*scheduled) {
		return next(), nil
	}
	switch cj.Spec.ConcurrencyPolicy {
	case batchv1.ForbidConcurrent:
		if len(status.Active) > 0 {
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
			return next(), nil
		}
	case batchv1.ReplaceConcurrent:
		for _, ref := range status.Active {
			err := c.client.BatchV1().Jobs(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted job %v", ref.Name)
		}
		status.Active = nil
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: jobName, Namespace: cj.Namespace,
			Labels:          copyMap(cj.Spec.JobTemplate.Labels),
			Annotations:     copyMap(cj.Spec.JobTemplate.Annotations),
			OwnerReferences: []metav1.OwnerReference{*controllerref.NewControllerRef(cj, controllerKind)},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	if j.Annotations == nil {
		j.Annotations = map[string]string{}
	}
	j.Annotations[ScheduledTimestampAnnotation] = scheduled.Format(time.RFC3339)
	created, err := c.client.BatchV1().Jobs(cj.Namespace).Create(ctx, j, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		existing, gerr := c.client.BatchV1().Jobs(cj.Namespace).Get(ctx, jobName, metav1.GetOptions{})
		if gerr != nil {
			return nil, gerr
		}
		if ref := metav1.GetControllerOf(existing); ref == nil || ref.UID != cj.UID {
			return nil, fmt.Errorf("job %s exists and is not this cronjob's", jobName)
		}
		created = existing
	case err != nil:
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedCreate", "Error creating job: %v", err)
		return nil, err
	default:
		c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulCreate", "Created job %v", created.Name)
	}
	if jobFinished(created) == "" {
		status.Active = append(status.Active, jobReference(created))
	}
	status.LastScheduleTime = &metav1.Time{Time: *scheduled}
	return next(), nil
}

// mostRecentScheduleTime is the latest schedule time in (earliest, now], with the
// number of such times; earliest is the last schedule time (or the creation time), no
// earlier than startingDeadlineSeconds ago. Mirrors mostRecentScheduleTime.
func mostRecentScheduleTime(cj *batchv1.CronJob, status *batchv1.CronJobStatus, now time.Time, sched cron.Schedule) (*time.Time, int) {
	earliest := cj.CreationTimestamp.Time
	if status.LastScheduleTime != nil {
		earliest = status.LastScheduleTime.Time
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		if from := now.Add(-time.Duration(*d) * time.Second); from.After(earliest) {
			earliest = from
		}
	}
	var last *time.Time
	missed := 0
	for t := sched.Next(earliest); !t.After(now); t = sched.Next(t) {
		t := t
		last = &t
		missed++
		if missed > maxMissedSchedules+1 {
			// Jump to the end: only the most recent time is started.
			for n := sched.Next(t); !n.After(now); n = sched.Next(n) {
				n := n
				last = &n
			}
			break
		}
	}
	return last, missed
}

// cleanupFinishedJobs deletes the oldest finished Jobs beyond the history limits.
// Mirrors cleanupFinishedJobs.
func (c *Controller) cleanupFinishedJobs(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	var succeeded, failed []*batchv1.Job
	for _, j := range jobs {
		switch jobFinished(j) {
		case batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	for _, group := range []struct {
		jobs  []*batchv1.Job
		limit *int32
	}{{succeeded, cj.Spec.SuccessfulJobsHistoryLimit}, {failed, cj.Spec.FailedJobsHistoryLimit}} {
		if group.limit == nil || len(group.jobs) <= int(*group.limit) {
			continue
		}
		sort.Slice(group.jobs, func(i, k int) bool {
			return group.jobs[i].CreationTimestamp.Before(&group.jobs[k].CreationTimestamp)
		})
		for _, j := range group.jobs[:len(group.jobs)-int(*group.limit)] {
			if j.DeletionTimestamp != nil {
				continue
			}
			err := c.client.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted job %v", j.Name)
		}
	}
	return nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
