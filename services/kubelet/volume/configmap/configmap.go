// Package configmap is the configMap volume plugin: the ConfigMap's keys as
// files, written atomically and refreshed while the pod lives. Mirrors
// k8s.io/kubernetes pkg/volume/configmap.
package configmap

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volume/atomicwriter"
	"skiff.dev/services/kubelet/volume/emptydir"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/configmap"

type plugin struct {
	host volume.Host
}

// NewPlugin returns the configMap plugin.
func NewPlugin(host volume.Host) volume.Plugin { return &plugin{host: host} }

func (p *plugin) GetPluginName() string { return PluginName }

func (p *plugin) CanSupport(spec *v1.Volume) bool { return spec.ConfigMap != nil }

// RequiresRemount: an updated ConfigMap reaches the files.
func (p *plugin) RequiresRemount() bool { return true }

func (p *plugin) NewMounter(spec *v1.Volume, pod *v1.Pod) (volume.Mounter, error) {
	return &mounter{
		host:   p.host,
		source: *spec.ConfigMap,
		pod:    pod,
		path:   p.host.GetPodVolumeDir(pod.UID, PluginName, spec.Name),
	}, nil
}

func (p *plugin) NewUnmounter(volName string, podUID types.UID) (volume.Unmounter, error) {
	return unmounter{path: p.host.GetPodVolumeDir(podUID, PluginName, volName), mounter: p.host.GetMounter()}, nil
}

type mounter struct {
	host   volume.Host
	source v1.ConfigMapVolumeSource
	pod    *v1.Pod
	path   string
}

func (m *mounter) GetPath() string { return m.path }

// GetAttributes: API data volumes are read-only in every container.
func (m *mounter) GetAttributes() volume.Attributes {
	return volume.Attributes{ReadOnly: true, Managed: true}
}

// SetUp reads the ConfigMap and writes its payload; a missing ConfigMap is
// an error unless the volume is optional (then the directory is empty).
func (m *mounter) SetUp(ctx context.Context) error {
	optional := m.source.Optional != nil && *m.source.Optional
	cm, err := m.host.GetConfigMap(ctx, m.pod.Namespace, m.source.Name)
	switch {
	case apierrors.IsNotFound(err) && optional:
		cm = &v1.ConfigMap{}
	case err != nil:
		return err
	}
	payload, err := MakePayload(m.source.Items, cm, m.source.DefaultMode, optional)
	if err != nil {
		return err
	}
	if err := emptydir.SetUpDir(m.path); err != nil {
		return err
	}
	if err := atomicwriter.New(m.path).Write(payload); err != nil {
		return fmt.Errorf("write configmap volume %s: %w", m.path, err)
	}
	return nil
}

// MakePayload returns the files of cm: every key of data and binaryData with
// defaultMode (default 0644) when items is empty, else each item's key at
// its path with its mode. A missing item key is an error "configmap
// references non-existent config key: KEY" unless optional. Mirrors
// configmap.MakePayload.
func MakePayload(items []v1.KeyToPath, cm *v1.ConfigMap, defaultMode *int32, optional bool) (map[string]atomicwriter.FileProjection, error) {
	mode := int32(v1.ConfigMapVolumeSourceDefaultMode)
	if defaultMode != nil {
		mode = *defaultMode
	}
	payload := make(map[string]atomicwriter.FileProjection, len(cm.Data)+len(cm.BinaryData))
	if len(items) == 0 {
		for k, v := range cm.Data {
			payload[k] = atomicwriter.FileProjection{Data: []byte(v), Mode: mode}
		}
		for k, v := range cm.BinaryData {
			payload[k] = atomicwriter.FileProjection{Data: v, Mode: mode}
		}
		return payload, nil
	}
	for _, item := range items {
		var data []byte
		if s, ok := cm.Data[item.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[item.Key]; ok {
			data = b
		} else {
			if optional {
				continue
			}
			return nil, fmt.Errorf("configmap references non-existent config key: %s", item.Key)
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
