// Package volumetest gives volume plugin tests a volume.Host over a real pods
// directory (a t.TempDir) and a real client.
package volumetest

import (
	"context"
	"errors"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/kubelet/volume"
)

// Host is a volume.Host for tests: volumes under PodsDir, objects through
// Client, Allocatable as the node's, tokens from Tokens (nil: an error), mounts by
// Mounter (nil: the node's, volume.NodeMounter).
type Host struct {
	PodsDir     string
	Client      kubernetes.Interface
	Allocatable v1.ResourceList
	Tokens      func(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	Mounter     volume.MountInterface
}

var _ volume.Host = (*Host)(nil)

func (h *Host) GetPodVolumeDir(podUID types.UID, pluginName, volumeName string) string {
	return volume.PodVolumeDir(h.PodsDir, podUID, pluginName, volumeName)
}

func (h *Host) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return h.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (h *Host) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return h.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (h *Host) GetNodeAllocatable() v1.ResourceList { return h.Allocatable }

func (h *Host) GetMounter() volume.MountInterface {
	if h.Mounter == nil {
		return volume.NodeMounter{}
	}
	return h.Mounter
}

func (h *Host) GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if h.Tokens == nil {
		return nil, errors.New("volumetest.Host: no token source")
	}
	return h.Tokens(ctx, namespace, name, tr)
}
