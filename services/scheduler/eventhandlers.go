package scheduler

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	toolscache "k8s.io/client-go/tools/cache"

	"skiff.dev/services/scheduler/internal/queue"
)

// addAllEventHandlers connects the informers to the queue and the cache.
// Mirrors kube-scheduler's eventhandlers.go addAllEventHandlers.
func (s *Scheduler) addAllEventHandlers() error {
	if _, err := s.podInformer.AddEventHandler(toolscache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			pod := podFromObj(obj)
			return pod != nil && pod.Spec.NodeName == "" && s.responsibleForPod(pod)
		},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    s.addPodToSchedulingQueue,
			UpdateFunc: s.updatePodInSchedulingQueue,
			DeleteFunc: s.deletePodFromSchedulingQueue,
		},
	}); err != nil {
		return fmt.Errorf("adding unscheduled pod handler: %w", err)
	}
	if _, err := s.assignedPodInformer.AddEventHandler(toolscache.FilteringResourceEventHandler{
		// Pods of every scheduler, and pods created with a nodeName, take
		// room on their node.
		FilterFunc: func(obj any) bool {
			pod := podFromObj(obj)
			return pod != nil && pod.Spec.NodeName != ""
		},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    s.addPodToCache,
			UpdateFunc: s.updatePodInCache,
			DeleteFunc: s.deletePodFromCache,
		},
	}); err != nil {
		return fmt.Errorf("adding assigned pod handler: %w", err)
	}
	if _, err := s.nodeInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.addNodeToCache,
		UpdateFunc: s.updateNodeInCache,
		DeleteFunc: s.deleteNodeFromCache,
	}); err != nil {
		return fmt.Errorf("adding node handler: %w", err)
	}
	// A claim, volume or class that appears or changes may let a pod VolumeBinding
	// rejected fit (a claim bound, a volume made available, a class created).
	for event, informer := range map[string]toolscache.SharedIndexInformer{
		queue.EventPersistentVolumeClaimChange: s.informers.Core().V1().PersistentVolumeClaims().Informer(),
		queue.EventPersistentVolumeChange:      s.informers.Core().V1().PersistentVolumes().Informer(),
		queue.EventStorageClassChange:          s.informers.Storage().V1().StorageClasses().Informer(),
	} {
		move := func() { s.queue.MoveAllToActiveOrBackoffQueue(event, nil) }
		if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { move() },
			UpdateFunc: func(any, any) { move() },
		}); err != nil {
			return fmt.Errorf("adding %s handler: %w", event, err)
		}
	}
	return nil
}

// volumeInformers are the informers of VolumeBinding's claims, volumes and classes.
func (s *Scheduler) volumeInformers() []toolscache.SharedIndexInformer {
	return []toolscache.SharedIndexInformer{
		s.informers.Core().V1().PersistentVolumeClaims().Informer(),
		s.informers.Core().V1().PersistentVolumes().Informer(),
		s.informers.Storage().V1().StorageClasses().Informer(),
	}
}

// responsibleForPod reports whether this scheduler serves the pod's
// schedulerName; an unset name means the default scheduler's, as the
// apiserver would have defaulted it.
func (s *Scheduler) responsibleForPod(pod *v1.Pod) bool {
	name := pod.Spec.SchedulerName
	if name == "" {
		name = DefaultSchedulerName
	}
	return name == s.schedulerName
}

// podFromObj unwraps a pod from an informer object, including the tombstone
// a relist leaves for a deletion it missed.
func podFromObj(obj any) *v1.Pod {
	switch t := obj.(type) {
	case *v1.Pod:
		return t
	case toolscache.DeletedFinalStateUnknown:
		pod, _ := t.Obj.(*v1.Pod)
		return pod
	}
	return nil
}

func nodeFromObj(obj any) *v1.Node {
	switch t := obj.(type) {
	case *v1.Node:
		return t
	case toolscache.DeletedFinalStateUnknown:
		node, _ := t.Obj.(*v1.Node)
		return node
	}
	return nil
}

func (s *Scheduler) addPodToSchedulingQueue(obj any) {
	pod := podFromObj(obj)
	s.logger.Debug("add event for unscheduled pod", "pod", podKey(pod))
	s.queue.Add(pod)
}

func (s *Scheduler) updatePodInSchedulingQueue(oldObj, newObj any) {
	oldPod, newPod := podFromObj(oldObj), podFromObj(newObj)
	if oldPod.ResourceVersion == newPod.ResourceVersion {
		return // a relist replaying an unchanged pod
	}
	// A pod we assumed is already being bound; re-queueing it would only
	// produce a skipped attempt.
	if s.cache.IsAssumedPod(newPod) {
		return
	}
	s.queue.Update(oldPod, newPod)
}

func (s *Scheduler) deletePodFromSchedulingQueue(obj any) {
	pod := podFromObj(obj)
	if pod == nil {
		return
	}
	s.logger.Debug("delete event for unscheduled pod", "pod", podKey(pod))
	s.queue.Delete(pod)
}

func (s *Scheduler) addPodToCache(obj any) {
	pod := podFromObj(obj)
	if err := s.cache.AddPod(pod); err != nil {
		s.logger.Error("adding assigned pod to the scheduler cache", "pod", podKey(pod), "err", err)
	}
}

func (s *Scheduler) updatePodInCache(oldObj, newObj any) {
	oldPod, newPod := podFromObj(oldObj), podFromObj(newObj)
	if oldPod.UID != newPod.UID {
		// Deleted and recreated under the same name between two events.
		s.deletePodFromCache(oldObj)
		s.addPodToCache(newObj)
		return
	}
	if err := s.cache.UpdatePod(oldPod, newPod); err != nil {
		s.logger.Error("updating assigned pod in the scheduler cache", "pod", podKey(newPod), "err", err)
	}
}

// deletePodFromCache frees the pod's resources, which may let parked pods
// fit, so they are all retried.
func (s *Scheduler) deletePodFromCache(obj any) {
	pod := podFromObj(obj)
	if pod == nil {
		return
	}
	if err := s.cache.RemovePod(pod); err != nil {
		s.logger.Error("removing assigned pod from the scheduler cache", "pod", podKey(pod), "err", err)
	}
	s.queue.MoveAllToActiveOrBackoffQueue(queue.EventAssignedPodDelete, nil)
}

func (s *Scheduler) addNodeToCache(obj any) {
	node := nodeFromObj(obj)
	if node == nil {
		return
	}
	s.cache.AddNode(node)
	s.logger.Debug("add event for node", "node", node.Name)
	s.queue.MoveAllToActiveOrBackoffQueue(queue.EventNodeAdd, nil)
}

func (s *Scheduler) updateNodeInCache(oldObj, newObj any) {
	oldNode, newNode := nodeFromObj(oldObj), nodeFromObj(newObj)
	if oldNode == nil || newNode == nil {
		return
	}
	s.cache.UpdateNode(oldNode, newNode)
	if nodeSchedulingPropertiesChange(newNode, oldNode) {
		s.queue.MoveAllToActiveOrBackoffQueue(queue.EventNodeUpdate, nil)
	}
}

func (s *Scheduler) deleteNodeFromCache(obj any) {
	node := nodeFromObj(obj)
	if node == nil {
		return
	}
	if err := s.cache.RemoveNode(node); err != nil {
		s.logger.Error("removing node from the scheduler cache", "node", node.Name, "err", err)
	}
}

// nodeSchedulingPropertiesChange reports whether a node update can make a
// parked pod fit: more allocatable, new labels, fewer taints, uncordoned.
// Heartbeats (conditions, lastHeartbeatTime) change nothing and must not
// wake every pending pod every few seconds. Mirrors kube-scheduler's
// nodeSchedulingPropertiesChange.
func nodeSchedulingPropertiesChange(newNode, oldNode *v1.Node) bool {
	if newNode.Spec.Unschedulable != oldNode.Spec.Unschedulable && !newNode.Spec.Unschedulable {
		return true
	}
	if !apiequality.Semantic.DeepEqual(oldNode.Status.Allocatable, newNode.Status.Allocatable) ||
		!apiequality.Semantic.DeepEqual(oldNode.Status.Capacity, newNode.Status.Capacity) {
		return true
	}
	if !apiequality.Semantic.DeepEqual(oldNode.Labels, newNode.Labels) {
		return true
	}
	return !apiequality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints)
}

func podKey(pod *v1.Pod) string {
	if pod == nil {
		return ""
	}
	return pod.Namespace + "/" + pod.Name
}
