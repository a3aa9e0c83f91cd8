// Package emptydir is the emptyDir volume plugin: a directory that lives as
// long as the pod, on the node's disk under the pod's directory, or a tmpfs
// for medium Memory. It also sets up the directories of the volumes that
// kube backs with an emptyDir (configMap, secret, downwardAPI, projected).
// Mirrors k8s.io/kubernetes pkg/volume/emptydir.
package emptydir

import (
	"context"
	"fmt"
	"io/fs"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/volume"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/empty-dir"

// perm is an emptyDir's mode: anyone may write, as kube makes it.
const perm fs.FileMode = 0o777

type plugin struct {
	host volume.Host
}

// NewPlugin returns the emptyDir plugin.
func NewPlugin(host volume.Host) volume.Plugin { return &plugin{host: host} }

func (p *plugin) GetPluginName() string { return PluginName }

func (p *plugin) CanSupport(spec *v1.Volume) bool { return spec.EmptyDir != nil }

func (p *plugin) RequiresRemount() bool { return false }

// NewMounter refuses a sizeLimit on a disk-backed emptyDir: kube enforces it
// by evicting the pod, which this kubelet does not do, so accepting it would
// promise a limit nobody keeps. Medium "HugePages*" is refused too.
func (p *plugin) NewMounter(spec *v1.Volume, pod *v1.Pod) (volume.Mounter, error) {
	src := spec.EmptyDir
	m := &mounter{path: p.host.GetPodVolumeDir(pod.UID, PluginName, spec.Name), medium: src.Medium, mounter: p.host.GetMounter()}
	switch src.Medium {
	case v1.StorageMediumDefault:
		if src.SizeLimit != nil && !src.SizeLimit.IsZero() {
			return nil, fmt.Errorf("emptyDir %q: sizeLimit on a disk-backed emptyDir is enforced by eviction, which this kubelet does not do; use medium: Memory for a hard limit", spec.Name)
		}
	case v1.StorageMediumMemory:
		m.size = memorySize(src.SizeLimit, pod, p.host.GetNodeAllocatable())
	default:
		return nil, fmt.Errorf("emptyDir %q: medium %q is not supported", spec.Name, src.Medium)
	}
	return m, nil
}

func (p *plugin) NewUnmounter(volName string, podUID types.UID) (volume.Unmounter, error) {
	return unmounter{path: p.host.GetPodVolumeDir(podUID, PluginName, volName), mounter: p.host.GetMounter()}, nil
}

// memorySize is the tmpfs size of a memory-backed emptyDir: its sizeLimit,
// else the pod's memory limit when every container has one, else the node's
// allocatable memory (kube's SizeMemoryBackedVolumes); 0 when none is known.
func memorySize(sizeLimit *resource.Quantity, pod *v1.Pod, allocatable v1.ResourceList) int64 {
	if sizeLimit != nil && !sizeLimit.IsZero() {
		return sizeLimit.Value()
	}
	var podLimit int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			podLimit = 0
			break
		}
		podLimit += q.Value()
	}
	if podLimit > 0 {
		return podLimit
	}
	if q, ok := allocatable[v1.ResourceMemory]; ok {
		return q.Value()
	}
	return 0
}

type mounter struct {
	path    string
	medium  v1.StorageMedium
	size    int64
	mounter volume.MountInterface
}

func (m *mounter) GetPath() string                  { return m.path }
func (m *mounter) GetAttributes() volume.Attributes { return volume.Attributes{Managed: true} }

func (m *mounter) SetUp(context.Context) error {
	if m.medium == v1.StorageMediumMemory {
		return m.mounter.SetUpTmpfs(m.path, m.size)
	}
	return SetUpDir(m.path)
}

type unmounter struct {
	path    string
	mounter volume.MountInterface
}

func (u unmounter) TearDown() error { return u.mounter.TearDownDir(u.path) }

// SetUpDir creates dir (mode 0777) if it does not exist.
func SetUpDir(dir string) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// MkdirAll's mode passes through the umask.
	return os.Chmod(dir, perm)
}
