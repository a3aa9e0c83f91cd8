package pod

import (
	"context"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	kubetypes "skiff.dev/services/kubelet/types"
)

// MirrorClient creates and deletes the mirror pods of a node's static pods
// in the API server. Mirrors kubepod.basicMirrorClient.
type MirrorClient struct {
	client   kubernetes.Interface
	nodeName string
}

// NewMirrorClient returns a MirrorClient writing as nodeName through client.
func NewMirrorClient(client kubernetes.Interface, nodeName string) *MirrorClient {
	return &MirrorClient{client: client, nodeName: nodeName}
}

// CreateMirrorPod creates the mirror of static pod: a copy with the
// kubernetes.io/config.mirror annotation set to the static pod's hash and the
// Node as its controller owner (so NodeRestriction admits it and it goes
// with the Node). An existing mirror of the same hash is success; node is
// the kubelet's Node object (its UID goes in the owner reference).
func (mc *MirrorClient) CreateMirrorPod(ctx context.Context, pod *v1.Pod, node *v1.Node) error {
	mirror := pod.DeepCopy()
	mirror.UID, mirror.ResourceVersion = "", ""
	mirror.Annotations = maps.Clone(pod.Annotations)
	hash := pod.Annotations[kubetypes.ConfigHashAnnotationKey]
	mirror.Annotations[kubetypes.ConfigMirrorAnnotationKey] = hash
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: mc.nodeName, UID: node.UID, Controller: ptr.To(true),
	}}
	mirror.Status = v1.PodStatus{}
	_, err := mc.client.CoreV1().Pods(mirror.Namespace).Create(ctx, mirror, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, getErr := mc.client.CoreV1().Pods(mirror.Namespace).Get(ctx, mirror.Name, metav1.GetOptions{})
		if getErr == nil && existing.Annotations[kubetypes.ConfigMirrorAnnotationKey] == hash {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w", mirror.Namespace, mirror.Name, err)
	}
	return nil
}

// DeleteMirrorPod deletes the mirror pod namespace/name at once (grace
// period 0), only if its UID is still uid when uid is given. It returns
// whether it deleted it; a mirror already gone or replaced is not an error.
// Mirrors basicMirrorClient.DeleteMirrorPod.
func (mc *MirrorClient) DeleteMirrorPod(ctx context.Context, namespace, name string, uid *types.UID) (bool, error) {
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if uid != nil {
		opts.Preconditions = &metav1.Preconditions{UID: uid}
	}
	err := mc.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("delete mirror pod %s/%s: %w", namespace, name, err)
}
