// Package podgc is kube's pod garbage collector: every 20 s it deletes terminated pods
// beyond --terminated-pod-gc-threshold (oldest first), pods bound to nodes that have
// been gone for a 40 s quarantine, and terminating pods that were never scheduled.
// Mirrors k8s.io/kubernetes/pkg/controller/podgc.
package podgc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

const (
	// gcCheckPeriod is how often the collector runs.
	gcCheckPeriod = 20 * time.Second
	// quarantineTime is how long a node must stay missing before its pods are deleted:
	// the node informer may lag a node's registration.
	quarantineTime = 40 * time.Second
)

// Controller is the pod garbage collector.
type Controller struct {
	client                 kubernetes.Interface
	clock                  clock.WithTicker
	log                    *slog.Logger
	podLister              corelisters.PodLister
	nodeLister             corelisters.NodeLister
	cacheSynced            []cache.InformerSynced
	terminatedPodThreshold int
	// nodeQueue holds names of missing nodes until their quarantine ends.
	nodeQueue workqueue.TypedDelayingInterface[string]
}

// New builds the collector; terminatedPodThreshold 0 keeps every terminated pod.
func New(podInformer coreinformers.PodInformer, nodeInformer coreinformers.NodeInformer, client kubernetes.Interface,
	terminatedPodThreshold int, c clock.WithTicker) *Controller {
	return &Controller{
		client: client, clock: c,
		log:                    slog.Default().With("controller", "pod-garbage-collector-controller"),
		podLister:              podInformer.Lister(),
		nodeLister:             nodeInformer.Lister(),
		cacheSynced:            []cache.InformerSynced{podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
		terminatedPodThreshold: terminatedPodThreshold,
		nodeQueue:              workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "orphaned_pods_nodes", Clock: c}),
	}
}

// Run collects every 20 s until ctx ends.
func (gcc *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer gcc.nodeQueue.ShutDown()
	gcc.log.Info("starting")
	defer gcc.log.Info("stopped")
	if !cache.WaitForNamedCacheSync("pod-garbage-collector-controller", ctx.Done(), gcc.cacheSynced...) {
		return
	}
	wait.BackoffUntilWithContext(ctx, func(ctx context.Context) {
		if err := gcc.gc(ctx); err != nil {
			gcc.log.Error("collecting pods", "err", err)
		}
	}, wait.NewJitteredBackoffManager(gcCheckPeriod, 0, gcc.clock), true)
}

// gc is one collection (kube's gc).
func (gcc *Controller) gc(ctx context.Context) error {
	pods, err := gcc.podLister.List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := gcc.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	if gcc.terminatedPodThreshold > 0 {
		errs = append(errs, gcc.gcTerminated(ctx, pods))
	}
	errs = append(errs, gcc.gcOrphaned(ctx, pods, nodes), gcc.gcUnscheduledTerminating(ctx, pods))
	return errors.Join(errs...)
}

func isPodTerminated(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// gcTerminated deletes the terminated pods beyond the threshold: evicted ones first,
// then the oldest.
func (gcc *Controller) gcTerminated(ctx context.Context, pods []*v1.Pod) error {
	var terminated []*v1.Pod
	for _, pod := range pods {
		if isPodTerminated(pod) {
			terminated = append(terminated, pod)
		}
	}
	deleteCount := len(terminated) - gcc.terminatedPodThreshold
	if deleteCount <= 0 {
		return nil
	}
	gcc.log.Info("garbage collecting terminated pods", "numPods", deleteCount)
	slices.SortFunc(terminated, byEvictionAndCreationTimestamp)
	return gcc.deleteAll(ctx, terminated[:deleteCount], nil)
}

// byEvictionAndCreationTimestamp orders evicted pods first, then by creation time and name.
func byEvictionAndCreationTimestamp(a, b *v1.Pod) int {
	if ea, eb := a.Status.Reason == "Evicted", b.Status.Reason == "Evicted"; ea != eb {
		if ea {
			return -1
		}
		return 1
	}
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if c := cmpString(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmpString(a.Name, b.Name)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// gcOrphaned quarantines the nodes pods are bound to but that do not exist, and deletes
// the pods of those still missing after the quarantine, checked against the apiserver.
func (gcc *Controller) gcOrphaned(ctx context.Context, pods []*v1.Pod, nodes []*v1.Node) error {
	existing := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		existing[node.Name] = true
	}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" && !existing[pod.Spec.NodeName] {
			gcc.nodeQueue.AddAfter(pod.Spec.NodeName, quarantineTime)
		}
	}
	deleted, err := gcc.discoverDeletedNodes(ctx, existing)
	if len(deleted) == 0 {
		return err
	}
	var orphans []*v1.Pod
	for _, pod := range pods {
		if deleted[pod.Spec.NodeName] {
			gcc.log.Info("found an orphaned pod of a deleted node: deleting it", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName)
			orphans = append(orphans, pod)
		}
	}
	return errors.Join(err, gcc.deleteAll(ctx, orphans, &v1.PodCondition{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists",
	}))
}

// discoverDeletedNodes drains the nodes whose quarantine ended and returns those the
// apiserver confirms are gone.
func (gcc *Controller) discoverDeletedNodes(ctx context.Context, existing map[string]bool) (map[string]bool, error) {
	deleted := map[string]bool{}
	var errs []error
	for gcc.nodeQueue.Len() > 0 {
		name, quit := gcc.nodeQueue.Get()
		if quit {
			break
		}
		if !existing[name] {
			_, err := gcc.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				deleted[name] = true
			case err != nil:
				errs = append(errs, fmt.Errorf("check node %s: %w", name, err))
			}
		}
		gcc.nodeQueue.Done(name)
	}
	return deleted, errors.Join(errs...)
}

// gcUnscheduledTerminating force-deletes terminating pods no kubelet will ever finish.
func (gcc *Controller) gcUnscheduledTerminating(ctx context.Context, pods []*v1.Pod) error {
	var doomed []*v1.Pod
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil && pod.Spec.NodeName == "" {
			doomed = append(doomed, pod)
		}
	}
	return gcc.deleteAll(ctx, doomed, nil)
}

// deleteAll marks each pod Failed (with condition, if any) unless it is terminal, then
// deletes it with grace period 0, in parallel (kube's markFailedAndDeletePodWithCondition).
func (gcc *Controller) deleteAll(ctx context.Context, pods []*v1.Pod, condition *v1.PodCondition) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, pod := range pods {
		wg.Go(func() {
			if err := gcc.markFailedAndDeletePod(ctx, pod, condition); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (gcc *Controller) markFailedAndDeletePod(ctx context.Context, cached *v1.Pod, condition *v1.PodCondition) error {
	pods := gcc.client.CoreV1().Pods(cached.Namespace)
	if !isPodTerminated(cached) {
		pod := cached.DeepCopy()
		pod.Status.Phase = v1.PodFailed
		if condition != nil {
			c := *condition
			c.LastTransitionTime = metav1.NewTime(gcc.clock.Now())
			pod.Status.Conditions = append(slices.DeleteFunc(pod.Status.Conditions, func(x v1.PodCondition) bool { return x.Type == c.Type }), c)
		}
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("mark pod %s/%s Failed: %w", pod.Namespace, pod.Name, err)
		}
	}
	err := pods.Delete(ctx, cached.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &cached.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", cached.Namespace, cached.Name, err)
	}
	return nil
}
