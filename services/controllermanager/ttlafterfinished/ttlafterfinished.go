// Package ttlafterfinished is kube-controller-manager's TTL-after-finished controller:
// it deletes a finished Job (Complete or Failed) ttlSecondsAfterFinished after it
// finished, with foreground propagation so its pods go first. Mirrors
// k8s.io/kubernetes/pkg/controller/ttlafterfinished.
package ttlafterfinished

import (
	"context"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "ttl-after-finished-controller"

// Controller is the TTL-after-finished controller.
type Controller struct {
	client    kubernetes.Interface
	recorder  record.EventRecorder
	jobLister batchlisters.JobLister
	synced    cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger
}

// New builds the controller over the factory's Job informer.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	jobInformer := factory.Batch().V1().Jobs()
	c := &Controller{
		client:    client,
		recorder:  recorder,
		jobLister: jobInformer.Lister(),
		synced:    jobInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ttl_jobs_to_delete"}),
		log: slog.With("controller", Name),
	}
	enqueue := func(obj interface{}) {
		if job, ok := obj.(*batchv1.Job); ok && needsCleanup(job) {
			if key, err := cache.MetaNamespaceKeyFunc(job); err == nil {
				c.queue.Add(key)
			}
		}
	}
	_, _ = jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	return c
}

// Run waits for the informer's cache, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, "ttl_after_finished", c.queue, []cache.InformerSynced{c.synced}, workers, c.log, c.processJob)
}

// needsCleanup: a finished Job with a TTL, not yet being deleted.
func needsCleanup(job *batchv1.Job) bool {
	return job.Spec.TTLSecondsAfterFinished != nil && job.DeletionTimestamp == nil && !finishTime(job).IsZero()
}

// finishTime is when the Job's Complete or Failed condition became True (zero if not
// finished).
func finishTime(job *batchv1.Job) time.Time {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// processJob deletes the Job once its TTL expired, or checks again when it will.
// The TTL is re-read from the server first, since a user may have changed it. Mirrors
// processJob.
func (c *Controller) processJob(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	job, err := c.jobLister.Jobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if expired, wait := c.expired(job); !expired {
		if wait > 0 {
			c.queue.AddAfter(key, wait)
		}
		return nil
	}
	fresh, err := c.client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if expired, wait := c.expired(fresh); !expired {
		if wait > 0 {
			c.queue.AddAfter(key, wait)
		}
		return nil
	}
	err = c.client.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
		Preconditions:     &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// expired reports whether job's TTL has run out, else how long until it does (0 when
// the Job needs no cleanup).
func (c *Controller) expired(job *batchv1.Job) (bool, time.Duration) {
	if !needsCleanup(job) {
		return false, 0
	}
	expireAt := finishTime(job).Add(time.Duration(*job.Spec.TTLSecondsAfterFinished) * time.Second)
	if left := time.Until(expireAt); left > 0 {
		return false, left
	}
	return true, 0
}
