// Package nodepods indexes a shared pod informer by spec.nodeName, so the node
// controllers find a node's pods without listing every pod. Mirrors kube's
// controller.AddPodNodeNameIndexer and PodNodeNameKeyIndex.
package nodepods

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// IndexName is the index of pods by spec.nodeName.
const IndexName = "spec.nodeName"

// AddIndexer adds the spec.nodeName index to podInformer unless another controller
// already did; call it before the informer starts.
func AddIndexer(podInformer cache.SharedIndexInformer) error {
	if _, ok := podInformer.GetIndexer().GetIndexers()[IndexName]; ok {
		return nil
	}
	return podInformer.AddIndexers(cache.Indexers{IndexName: func(obj any) ([]string, error) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{pod.Spec.NodeName}, nil
	}})
}

// OnNode returns the cached pods bound to nodeName; they are the cache's own objects,
// so callers copy before changing one.
func OnNode(indexer cache.Indexer, nodeName string) ([]*v1.Pod, error) {
	objs, err := indexer.ByIndex(IndexName, nodeName)
	if err != nil {
		return nil, err
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*v1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}
