// Package volume defines the kubelet's volume plugins: each plugin answers
// for one kind of pod volume (emptyDir, hostPath, configMap, ...) and gives a
// Mounter that makes the volume's directory on the host ready for the pod's
// containers, and an Unmounter that takes it down once the pod is gone. The
// plugins live in the packages beneath this one; the volume manager
// (package volumemanager) drives them. Mirrors k8s.io/kubernetes pkg/volume
// (VolumePlugin, Mounter, Unmounter, VolumeHost), without attach/detach and
// without persistent volumes.
package volume

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Host is what plugins get from the kubelet. Mirrors volume.VolumeHost.
type Host interface {
	// GetPodVolumeDir returns the directory of a pod's volume:
	// <root>/pods/<uid>/volumes/<plugin name with "/" as "~">/<volume>.
	GetPodVolumeDir(podUID types.UID, pluginName, volumeName string) string
	// GetConfigMap and GetSecret return the API objects volumes project, as
	// the kubelet's caches hold them (kube's GetConfigMapFunc and
	// GetSecretFunc); a missing object is a NotFound error.
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// GetNodeAllocatable is the node's allocatable resources: the limits the
	// downward API reports for a container that sets none.
	GetNodeAllocatable() v1.ResourceList
	// GetServiceAccountToken returns a token for service account
	// namespace/name as requested by tr, from the kubelet's token manager.
	GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	// GetMounter is what volumes are mounted and unmounted with (kube's
	// VolumeHost.GetMounter).
	GetMounter() MountInterface
}

// MountInterface makes and removes the directories volumes live in: the tmpfs of
// memory-backed ones (emptyDir medium Memory, secret, projected) and plain ones. The
// node's is NodeMounter; hollow nodes use DirMounter, which mounts
// nothing, as kubemark's hollow kubelets use mount-utils' FakeMounter. Mirrors the part
// of k8s.io/mount-utils' Interface the kubelet's volume plugins use.
type MountInterface interface {
	// SetUpTmpfs makes dir (creating it) a tmpfs of sizeBytes (0: the kernel's
	// default, half the memory) unless it already is one. Errors: dir cannot be made,
	// or the tmpfs cannot be mounted (no privilege): a memory-backed volume is never
	// silently put on disk.
	SetUpTmpfs(dir string, sizeBytes int64) error
	// TearDownDir unmounts dir if something is mounted on it, then removes it and its
	// content; a missing dir is not an error.
	TearDownDir(dir string) error
}

// Attributes describe how a mounted volume may be used.
type Attributes struct {
	// ReadOnly volumes are mounted read-only into every container whatever
	// the volumeMount says (the API data volumes: configMap, secret,
	// downwardAPI, projected).
	ReadOnly bool
	// Managed volumes belong to the pod (emptyDir and the API data
	// volumes): the kubelet gives their files the pod's fsGroup. A hostPath
	// is the node's and is left alone.
	Managed bool
}

// Mounter makes one volume of one pod ready on the host.
type Mounter interface {
	// GetPath is the volume's directory (or file) on the host: what the
	// containers' volumeMounts bind.
	GetPath() string
	// GetAttributes tells how the volume may be mounted.
	GetAttributes() Attributes
	// SetUp creates the volume or brings its content up to date; it is
	// called before the pod's containers start and, for plugins that
	// RequireRemount, again periodically. It must be idempotent.
	SetUp(ctx context.Context) error
}

// Unmounter takes one volume of one pod down.
type Unmounter interface {
	// TearDown removes what SetUp made (unmounting a tmpfs first); a volume
	// already gone is not an error.
	TearDown() error
}

// Plugin is one kind of volume. Mirrors volume.VolumePlugin.
type Plugin interface {
	// GetPluginName is kube's name, e.g. "kubernetes.io/empty-dir".
	GetPluginName() string
	// CanSupport reports whether spec is this plugin's kind of volume.
	CanSupport(spec *v1.Volume) bool
	// RequiresRemount reports whether SetUp must run again while the pod
	// lives, to follow changes of the volume's source.
	RequiresRemount() bool
	// NewMounter returns the Mounter of volume spec of pod; an error says
	// why the volume cannot be honoured (e.g. an unsupported option).
	NewMounter(spec *v1.Volume, pod *v1.Pod) (Mounter, error)
	// NewUnmounter returns the Unmounter of the volume named volName of the
	// pod with uid podUID, from what is on disk alone (the pod may be gone).
	NewUnmounter(volName string, podUID types.UID) (Unmounter, error)
}

// PluginMgr finds the plugin for a volume. Mirrors volume.VolumePluginMgr.
type PluginMgr struct {
	plugins []Plugin
}

// NewPluginMgr returns a manager of plugins; two plugins must not share a
// name.
func NewPluginMgr(plugins ...Plugin) (*PluginMgr, error) {
	seen := map[string]bool{}
	for _, p := range plugins {
		if seen[p.GetPluginName()] {
			return nil, fmt.Errorf("volume plugin %q registered twice", p.GetPluginName())
		}
		seen[p.GetPluginName()] = true
	}
	return &PluginMgr{plugins: plugins}, nil
}

// FindPluginBySpec returns the plugin supporting spec, or an error naming
// the volume's kind when skiff has none (e.g. persistentVolumeClaim).
func (pm *PluginMgr) FindPluginBySpec(spec *v1.Volume) (Plugin, error) {
	for _, p := range pm.plugins {
		if p.CanSupport(spec) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("volume %q: %s volumes are not supported by this kubelet", spec.Name, SourceKind(spec))
}

// FindPluginByName returns the plugin named name.
func (pm *PluginMgr) FindPluginByName(name string) (Plugin, error) {
	for _, p := range pm.plugins {
		if p.GetPluginName() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no volume plugin named %q", name)
}

// SourceKind returns the JSON name of the volume's source ("emptyDir",
// "persistentVolumeClaim", ...), or "unknown" when none is set.
func SourceKind(spec *v1.Volume) string {
	v := reflect.ValueOf(spec.VolumeSource)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "unknown"
}

// EscapePluginName turns a plugin name into a directory name as kube does:
// "kubernetes.io/empty-dir" becomes "kubernetes.io~empty-dir".
func EscapePluginName(name string) string {
	return strings.ReplaceAll(name, "/", "~")
}

// UnescapePluginName reverses EscapePluginName.
func UnescapePluginName(dir string) string {
	return strings.ReplaceAll(dir, "~", "/")
}

// PodVolumeDir returns <podsDir>/<uid>/volumes/<escaped plugin>/<volume>,
// kube's layout of /var/lib/kubelet/pods.
func PodVolumeDir(podsDir string, podUID types.UID, pluginName, volumeName string) string {
	return filepath.Join(podsDir, string(podUID), "volumes", EscapePluginName(pluginName), volumeName)
}
