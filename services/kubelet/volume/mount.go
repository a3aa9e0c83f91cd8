package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// NodeMounter is the node's MountInterface: real tmpfs mounts.
type NodeMounter struct{}

var _ MountInterface = NodeMounter{}

// SetUpTmpfs implements MountInterface with mount(2).
func (NodeMounter) SetUpTmpfs(dir string, sizeBytes int64) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	mounted, err := IsTmpfsMountPoint(dir)
	if err != nil {
		return err
	}
	if mounted {
		return nil
	}
	opts := "mode=0777"
	if sizeBytes > 0 {
		opts += ",size=" + strconv.FormatInt(sizeBytes, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s for a memory-backed volume: %w", dir, err)
	}
	return nil
}

// IsTmpfsMountPoint reports whether dir is the root of a tmpfs mount.
func IsTmpfsMountPoint(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return false, nil
	}
	return isMountPoint(dir)
}

// isMountPoint reports whether dir sits on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var self, parent unix.Stat_t
	if err := unix.Lstat(dir, &self); err != nil {
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(dir), err)
	}
	return self.Dev != parent.Dev, nil
}

// TearDownDir implements MountInterface with umount(2).
func (NodeMounter) TearDownDir(dir string) error {
	mounted, err := isMountPoint(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if mounted {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// DirMounter is the MountInterface of hollow nodes: it mounts nothing, so a
// memory-backed volume is a plain directory, as on kubemark's hollow kubelets
// (mount-utils' FakeMounter). A process running a hundred hollow nodes so needs no
// privilege to mount and leaves no mounts behind.
type DirMounter struct{}

var _ MountInterface = DirMounter{}

// SetUpTmpfs creates dir and mounts nothing.
func (DirMounter) SetUpTmpfs(dir string, _ int64) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// TearDownDir removes dir and its content.
func (DirMounter) TearDownDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
