// Package hostpath is the hostPath volume plugin: a file or directory of the
// node, checked against the volume's type before the pod's containers start.
// Mirrors k8s.io/kubernetes pkg/volume/hostpath.
package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/volume"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/host-path"

type plugin struct{}

// NewPlugin returns the hostPath plugin.
func NewPlugin() volume.Plugin { return plugin{} }

func (plugin) GetPluginName() string { return PluginName }

func (plugin) CanSupport(spec *v1.Volume) bool { return spec.HostPath != nil }

func (plugin) RequiresRemount() bool { return false }

// NewMounter refuses a relative path (the API validates it, but a static pod
// file is not validated).
func (plugin) NewMounter(spec *v1.Volume, _ *v1.Pod) (volume.Mounter, error) {
	src := spec.HostPath
	if !filepath.IsAbs(src.Path) {
		return nil, fmt.Errorf("hostPath %q: path %q must be absolute", spec.Name, src.Path)
	}
	t := v1.HostPathUnset
	if src.Type != nil {
		t = *src.Type
	}
	switch t {
	case v1.HostPathUnset, v1.HostPathDirectoryOrCreate, v1.HostPathDirectory, v1.HostPathFileOrCreate,
		v1.HostPathFile, v1.HostPathSocket, v1.HostPathCharDev, v1.HostPathBlockDev:
	default:
		return nil, fmt.Errorf("hostPath %q: unknown type %q", spec.Name, t)
	}
	return mounter{path: filepath.Clean(src.Path), pathType: t}, nil
}

// NewUnmounter: nothing of a hostPath belongs to the pod.
func (plugin) NewUnmounter(string, types.UID) (volume.Unmounter, error) { return unmounter{}, nil }

type mounter struct {
	path     string
	pathType v1.HostPathType
}

func (m mounter) GetPath() string                  { return m.path }
func (m mounter) GetAttributes() volume.Attributes { return volume.Attributes{} }

// SetUp checks (and for the *OrCreate types, creates) the path: a directory
// 0755, a file 0644, as kube does. Mirrors hostpath's checkType.
func (m mounter) SetUp(context.Context) error {
	info, err := os.Stat(m.path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hostPath type check failed: %w", err)
	}
	switch m.pathType {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			if err := os.MkdirAll(m.path, 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: create directory %s: %w", m.path, err)
			}
			return nil
		}
		if !info.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", m.path)
		}
	case v1.HostPathDirectory:
		if !exists || !info.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", m.path)
		}
	case v1.HostPathFileOrCreate:
		if !exists {
			f, err := os.OpenFile(m.path, os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("hostPath type check failed: create file %s: %w", m.path, err)
			}
			if f != nil {
				_ = f.Close()
			}
			return nil
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", m.path)
		}
	case v1.HostPathFile:
		if !exists || !info.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", m.path)
		}
	case v1.HostPathSocket:
		if !exists || info.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a socket file", m.path)
		}
	case v1.HostPathCharDev:
		if !exists || info.Mode()&fs.ModeCharDevice == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a character device", m.path)
		}
	case v1.HostPathBlockDev:
		if !exists || info.Mode()&fs.ModeDevice == 0 || info.Mode()&fs.ModeCharDevice != 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a block device", m.path)
		}
	}
	return nil
}

type unmounter struct{}

func (unmounter) TearDown() error { return nil }
