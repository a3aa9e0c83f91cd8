package volume

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
)

// Permission bits SetVolumeOwnership adds, kube's.
const (
	rwMask   = fs.FileMode(0o660)
	roMask   = fs.FileMode(0o440)
	execMask = fs.FileMode(0o110)
)

// SetVolumeOwnership gives everything under dir the group fsGroup and group
// read (and write, unless readOnly) permission; directories also get group
// search and the setgid bit, so new files inherit the group. With policy
// OnRootMismatch nothing is done when dir already has the group and bits.
// Symbolic links are re-grouped, not followed. Mirrors
// volume.SetVolumeOwnership.
func SetVolumeOwnership(dir string, fsGroup int64, readOnly bool, policy *v1.PodFSGroupChangePolicy) error {
	mask := rwMask
	if readOnly {
		mask = roMask
	}
	if policy != nil && *policy == v1.FSGroupChangeOnRootMismatch {
		if ok, err := rootMatches(dir, fsGroup, mask); err != nil || ok {
			return err
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(fsGroup)); err != nil {
			return fmt.Errorf("set fsGroup %d on %s: %w", fsGroup, path, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if info.IsDir() {
			m |= fs.ModeSetgid | execMask
		}
		if err := os.Chmod(path, info.Mode()|m); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
		return nil
	})
}

// rootMatches reports whether dir already has group fsGroup, the setgid bit
// and mask.
func rootMatches(dir string, fsGroup int64, mask fs.FileMode) (bool, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return false, err
	}
	gid, ok := fileGroup(info)
	return ok && gid == fsGroup && info.Mode()&fs.ModeSetgid != 0 && info.Mode()&(mask|execMask) == mask|execMask, nil
}
