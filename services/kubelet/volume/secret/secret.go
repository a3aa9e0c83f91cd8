// Package secret is the secret volume plugin: the Secret's keys as files on
// a tmpfs (never on disk), written atomically and refreshed while the pod
// lives. Mirrors k8s.io/kubernetes pkg/volume/secret.
package secret

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volume/atomicwriter"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/secret"

type plugin struct {
	host volume.Host
}

// NewPlugin returns the secret plugin.
func NewPlugin(host volume.Host) volume.Plugin { return &plugin{host: host} }

func (p *plugin) GetPluginName() string { return PluginName }

func (p *plugin) CanSupport(spec *v1.Volume) bool { return spec.Secret != nil }

// RequiresRemount: an updated Secret reaches the files.
func (p *plugin) RequiresRemount() bool { return true }

func (p *plugin) NewMounter(spec *v1.Volume, pod *v1.Pod) (volume.Mounter, error) {
	return &mounter{
		host:   p.host,
		source: *spec.Secret,
		pod:    pod,
		path:   p.host.GetPodVolumeDir(pod.UID, PluginName, spec.Name),
	}, nil
}

func (p *plugin) NewUnmounter(volName string, podUID types.UID) (volume.Unmounter, error) {
	return unmounter{path: p.host.GetPodVolumeDir(podUID, PluginName, volName), mounter: p.host.GetMounter()}, nil
}

type mounter struct {
	host   volume.Host
	source v1.SecretVolumeSource
	pod    *v1.Pod
	path   string
}

func (m *mounter) GetPath() string { return m.path }

// GetAttributes: API data volumes are read-only in every container.
func (m *mounter) GetAttributes() volume.Attributes {
	return volume.Attributes{ReadOnly: true, Managed: true}
}

// SetUp reads the Secret and writes its payload on a tmpfs; a missing Secret
// is an error unless the volume is optional (then the directory is empty).
func (m *mounter) SetUp(ctx context.Context) error {
	optional := m.source.Optional != nil && *m.source.Optional
	secret, err := m.host.GetSecret(ctx, m.pod.Namespace, m.source.SecretName)
	switch {
	case apierrors.IsNotFound(err) && optional:
		secret = &v1.Secret{}
	case err != nil:
		return err
	}
	payload, err := MakePayload(m.source.Items, secret, m.source.DefaultMode, optional)
	if err != nil {
		return err
	}
	if err := m.host.GetMounter().SetUpTmpfs(m.path, 0); err != nil {
		return err
	}
	if err := atomicwriter.New(m.path).Write(payload); err != nil {
		return fmt.Errorf("write secret volume %s: %w", m.path, err)
	}
	return nil
}

// MakePayload returns the files of secret: every key with defaultMode
// (default 0644) when items is empty, else each item's key at its path with
// its mode. A missing item key is an error "secret references non-existent
// secret key: KEY" unless optional. Mirrors secret.MakePayload.
func MakePayload(items []v1.KeyToPath, secret *v1.Secret, defaultMode *int32, optional bool) (map[string]atomicwriter.FileProjection, error) {
	mode := int32(v1.SecretVolumeSourceDefaultMode)
	if defaultMode != nil {
		mode = *defaultMode
	}
	payload := make(map[string]atomicwriter.FileProjection, len(secret.Data))
	if len(items) == 0 {
		for k, v := range secret.Data {
			payload[k] = atomicwriter.FileProjection{Data: v, Mode: mode}
		}
		return payload, nil
	}
	for _, item := range items {
		data, ok := secret.Data[item.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("secret references non-existent secret key: %s", item.Key)
		}
		fileMode := mode
		if item.Mode != nil {
			fileMode = *item.Mode
		}
		payload[item.Path] = atomicwriter.FileProjection{Data: data, Mode: fileMode}
	}
	return payload, nil
}

type unmounter struct {
	path    string
	mounter volume.MountInterface
}

func (u unmounter) TearDown() error { return u.mounter.TearDownDir(u.path) }
