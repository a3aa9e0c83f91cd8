// Package downwardapi is the downwardAPI volume plugin: the pod's metadata
// and its containers' requests and limits as files, refreshed when labels or
// annotations change. Mirrors k8s.io/kubernetes pkg/volume/downwardapi.
package downwardapi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/fieldpath"
	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volume/atomicwriter"
	"skiff.dev/services/kubelet/volume/emptydir"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/downward-api"

type plugin struct {
	host volume.Host
}

// NewPlugin returns the downwardAPI plugin.
func NewPlugin(host volume.Host) volume.Plugin { return &plugin{host: host} }

func (p *plugin) GetPluginName() string { return PluginName }

func (p *plugin) CanSupport(spec *v1.Volume) bool { return spec.DownwardAPI != nil }

// RequiresRemount: labels and annotations may change.
func (p *plugin) RequiresRemount() bool { return true }

func (p *plugin) NewMounter(spec *v1.Volume, pod *v1.Pod) (volume.Mounter, error) {
	return &mounter{
		host:   p.host,
		source: *spec.DownwardAPI,
		pod:    pod,
		path:   p.host.GetPodVolumeDir(pod.UID, PluginName, spec.Name),
	}, nil
}

func (p *plugin) NewUnmounter(volName string, podUID types.UID) (volume.Unmounter, error) {
	return unmounter{path: p.host.GetPodVolumeDir(podUID, PluginName, volName), mounter: p.host.GetMounter()}, nil
}

type mounter struct {
	host   volume.Host
	source v1.DownwardAPIVolumeSource
	pod    *v1.Pod
	path   string
}

func (m *mounter) GetPath() string { return m.path }

// GetAttributes: API data volumes are read-only in every container.
func (m *mounter) GetAttributes() volume.Attributes {
	return volume.Attributes{ReadOnly: true, Managed: true}
}

func (m *mounter) SetUp(context.Context) error {
	payload, err := CollectData(m.source.Items, m.source.DefaultMode, m.pod, m.host.GetNodeAllocatable())
	if err != nil {
		return err
	}
	if err := emptydir.SetUpDir(m.path); err != nil {
		return err
	}
	if err := atomicwriter.New(m.path).Write(payload); err != nil {
		return fmt.Errorf("write downwardAPI volume %s: %w", m.path, err)
	}
	return nil
}

// CollectData returns one file per item: a fieldRef's value
// (fieldpath.ExtractFieldPathAsString) or a resourceFieldRef's (with limits
// a container does not set taken from allocatable), with the item's mode or
// defaultMode (default 0644). Mirrors downwardapi.CollectData.
func CollectData(items []v1.DownwardAPIVolumeFile, defaultMode *int32, pod *v1.Pod, allocatable v1.ResourceList) (map[string]atomicwriter.FileProjection, error) {
	mode := int32(v1.DownwardAPIVolumeSourceDefaultMode)
	if defaultMode != nil {
		mode = *defaultMode
	}
	var defaulted *v1.Pod
	payload := make(map[string]atomicwriter.FileProjection, len(items))
	var errs []error
	for _, item := range items {
		f := atomicwriter.FileProjection{Mode: mode}
		if item.Mode != nil {
			f.Mode = *item.Mode
		}
		switch {
		case item.FieldRef != nil:
			v, err := fieldpath.ExtractFieldPathAsString(pod, item.FieldRef.FieldPath)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			f.Data = []byte(v)
		case item.ResourceFieldRef != nil:
			if defaulted == nil {
				defaulted = fieldpath.DefaultPodLimits(pod, allocatable)
			}
			v, err := fieldpath.ExtractResourceValueByContainerName(item.ResourceFieldRef, defaulted, item.ResourceFieldRef.ContainerName)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			f.Data = []byte(v)
		default:
			errs = append(errs, fmt.Errorf("downwardAPI item %q has neither fieldRef nor resourceFieldRef", item.Path))
			continue
		}
		payload[filepath.Clean(item.Path)] = f
	}
	return payload, errors.Join(errs...)
}

type unmounter struct {
	path    string
	mounter volume.MountInterface
}

func (u unmounter) TearDown() error { return u.mounter.TearDownDir(u.path) }
