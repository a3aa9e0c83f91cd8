package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// initMount is one CRI Mount as the container init performs it: a recursive
// bind of Source onto Target inside the container's mount namespace.
type initMount struct {
	Source            string `json:"source"`
	Target            string `json:"target"`
	ReadOnly          bool   `json:"readOnly,omitempty"`
	RecursiveReadOnly bool   `json:"recursiveReadOnly,omitempty"`
	// HostToContainer makes the bind a slave (rslave), so mounts the host
	// makes under Source later appear inside; otherwise it is rprivate.
	HostToContainer bool `json:"hostToContainer,omitempty"`
}

// validateMounts refuses the CRI mounts the process runtime cannot honour
// and returns the others in the order the init performs them: by depth of
// the container path (stable), as containerd sorts them, so a mount never
// hides one nested inside it.
func validateMounts(mounts []*runtimeapi.Mount) ([]initMount, error) {
	var out []initMount
	for _, m := range mounts {
		target := filepath.Clean(m.GetContainerPath())
		switch {
		case !filepath.IsAbs(m.GetContainerPath()) || target == "/":
			return nil, fmt.Errorf("mount %q: the container path must be an absolute path other than /", m.GetContainerPath())
		case m.GetImage() != nil:
			return nil, fmt.Errorf("mount at %s: image volumes are not supported by the process runtime, which has no images", target)
		case !filepath.IsAbs(m.GetHostPath()):
			return nil, fmt.Errorf("mount at %s: the host path %q must be absolute", target, m.GetHostPath())
		case len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0:
			return nil, fmt.Errorf("mount at %s: ID-mapped mounts (user namespaces) are not supported by the process runtime", target)
		case m.GetPropagation() == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			return nil, fmt.Errorf("mount at %s: Bidirectional mount propagation is not supported by the process runtime "+
				"(it would let the container mount on the host); use None or HostToContainer", target)
		case m.GetSelinuxRelabel() && selinuxEnabled():
			return nil, fmt.Errorf("mount at %s: SELinux relabelling is not supported by the process runtime", target)
		}
		out = append(out, initMount{
			Source:            filepath.Clean(m.GetHostPath()),
			Target:            target,
			ReadOnly:          m.GetReadonly() || m.GetRecursiveReadOnly(),
			RecursiveReadOnly: m.GetRecursiveReadOnly(),
			HostToContainer:   m.GetPropagation() == runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER,
		})
	}
	slices.SortStableFunc(out, func(a, b initMount) int {
		return strings.Count(a.Target, "/") - strings.Count(b.Target, "/")
	})
	return out, nil
}

// selinuxEnabled reports whether SELinux is mounted; without it a relabel
// request has nothing to do, as in containerd.
func selinuxEnabled() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}

// setupMounts runs in the container init, inside its new mount namespace,
// and performs mounts in order.
//
// A target that does not exist is created inside the read-write mount it is
// nested in, if any, as runc does; anywhere else it is created without
// touching the host: its deepest existing directory D is shadowed — a tmpfs (D's mode and owner)
// holding a recursive bind of every entry of D (and a copy of each
// symbolic link) is assembled at stagingDir and moved onto D (pivot_root
// when D is /) — and the missing directories, or the empty file a file
// mount needs, are made in that tmpfs. Inside the container D then shows
// the host's entries as they were at start, live and writable through to
// the host, plus the mount; a new entry made directly in D lives in the
// tmpfs, for the container's life. Everything disappears with the
// namespace when the container's last process ends.
//
// A missing host path is created as a directory first, as containerd does.
func setupMounts(stagingDir string, mounts []initMount) error {
	for _, m := range mounts {
		if _, err := os.Stat(m.Source); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(m.Source, 0o755); err != nil {
				return fmt.Errorf("create host path %s of the mount at %s: %w", m.Source, m.Target, err)
			}
		}
	}
	s := &shadows{staging: stagingDir, owned: map[string]bool{}, writable: map[string]bool{}}
	for _, m := range mounts {
		if err := s.mount(m); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.Source, m.Target, err)
		}
	}
	return nil
}

// shadows makes mount targets in the container's mount namespace.
type shadows struct {
	staging string
	// owned holds the directories of tmpfs shadows and those made in them:
	// what can be written without reaching the host.
	owned map[string]bool
	// writable holds the targets of the read-write mounts made so far.
	writable map[string]bool
}

// inWritableMount reports whether dir is in a read-write mount made
// earlier, i.e. in one of the pod's volumes.
func (s *shadows) inWritableMount(dir string) bool {
	for t := range s.writable {
		if dir == t || strings.HasPrefix(dir, t+"/") {
			return true
		}
	}
	return false
}

func (s *shadows) mount(m initMount) error {
	src, err := os.Stat(m.Source)
	if err != nil {
		return err
	}
	target, err := s.ensureTarget(m.Target, src.IsDir())
	if err != nil {
		return err
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	delete(s.owned, target) // it is the host's now
	if !m.ReadOnly {
		s.writable[target] = true
	}
	propagation := uintptr(unix.MS_PRIVATE)
	if m.HostToContainer {
		propagation = unix.MS_SLAVE
	}
	if err := unix.Mount("", target, "", unix.MS_REC|propagation, ""); err != nil {
		return fmt.Errorf("set propagation: %w", err)
	}
	switch {
	case m.RecursiveReadOnly:
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(-1, target, unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("make recursively read-only: %w", err)
		}
	case m.ReadOnly:
		if err := remountReadOnly(target); err != nil {
			return fmt.Errorf("make read-only: %w", err)
		}
	}
	return nil
}

// ensureTarget returns the resolved target path (symbolic links followed),
// making it — a directory, or an empty file when dir is false — in a shadow
// when it does not exist. Errors: a path component is not a directory or is
// a dangling link; the existing target's type differs from the source's.
func (s *shadows) ensureTarget(target string, dir bool) (string, error) {
	parts := strings.Split(strings.TrimPrefix(target, "/"), "/")
	existing := "/"
	i := 0
	var fi fs.FileInfo
	for ; i < len(parts); i++ {
		next := filepath.Join(existing, parts[i])
		info, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			resolved, err := filepath.EvalSymlinks(next)
			if err != nil {
				return "", fmt.Errorf("%s is a symbolic link that cannot be followed: %w", next, err)
			}
			if info, err = os.Stat(resolved); err != nil {
				return "", err
			}
			next = resolved
		}
		if i < len(parts)-1 && !info.IsDir() {
			return "", fmt.Errorf("%s is not a directory", next)
		}
		existing, fi = next, info
	}
	if i == len(parts) {
		if fi.IsDir() != dir {
			if dir {
				return "", fmt.Errorf("the host path is a directory but %s is not", existing)
			}
			return "", fmt.Errorf("the host path is a file but %s is a directory", existing)
		}
		return existing, nil
	}
	// A directory in a read-write volume gets the missing ones as runc
	// makes them, in the volume; anywhere else a shadow keeps the host's
	// filesystem as it is.
	if !s.owned[existing] && !s.inWritableMount(existing) {
		if err := s.shadow(existing); err != nil {
			return "", fmt.Errorf("shadow %s to create %s in it: %w", existing, target, err)
		}
	}
	p := existing
	for j := i; j < len(parts); j++ {
		p = filepath.Join(p, parts[j])
		var err error
		if j < len(parts)-1 || dir {
			err = os.Mkdir(p, 0o755)
			s.owned[p] = true
		} else {
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return "", err
		}
	}
	return p, nil
}

// shadow covers directory dir with a tmpfs that holds a recursive bind of
// each of dir's entries (symbolic links are copied), assembled at the
// staging directory first.
func (s *shadows) shadow(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=%o,uid=%d,gid=%d", st.Mode&0o7777, st.Uid, st.Gid)
	if err := unix.Mount("tmpfs", s.staging, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	// Unbindable while it is assembled, so that the recursive binds below,
	// whose trees contain it, leave it out.
	if err := unix.Mount("", s.staging, "", unix.MS_UNBINDABLE, ""); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := shadowEntry(filepath.Join(dir, e.Name()), filepath.Join(s.staging, e.Name())); err != nil {
			return err
		}
	}
	if err := unix.Mount("", s.staging, "", unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if dir == "/" {
		// The new root: pivot_root(".", ".") stacks the old root on it,
		// which is then detached (runc's way to avoid a put_old directory).
		if err := unix.Chdir(s.staging); err != nil {
			return err
		}
		if err := unix.PivotRoot(".", "."); err != nil {
			return fmt.Errorf("pivot_root: %w", err)
		}
		if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detach the old root: %w", err)
		}
		if err := unix.Chdir("/"); err != nil {
			return err
		}
	} else if err := unix.Mount(s.staging, dir, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move onto %s: %w", dir, err)
	}
	s.owned[dir] = true
	return nil
}

// shadowEntry recreates one directory entry src at dst in a shadow tmpfs.
// An entry removed meanwhile is skipped.
func shadowEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(link, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, fi.Mode().Perm()); err != nil {
			return err
		}
	default:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

// maskPaths runs in the container init, inside its mount namespace, after
// the mounts, as runc does: each existing path of readonly becomes a
// read-only bind of itself, and each existing path of masked is hidden, a
// directory under an empty read-only tmpfs and anything else under
// /dev/null (the kubelet's defaults hide /proc/kcore, /proc/keys... and make
// /proc/sys and others read-only). A path that does not exist is skipped.
func maskPaths(masked, readonly []string) error {
	for _, p := range readonly {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("read-only path %s: %w", p, err)
		}
		if err := remountReadOnly(p); err != nil {
			return fmt.Errorf("read-only path %s: %w", p, err)
		}
	}
	for _, p := range masked {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("masked path %s: %w", p, err)
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY, "size=0")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("masked path %s: %w", p, err)
		}
	}
	return nil
}

// remountReadOnly makes the mount at target read-only, keeping the flags it
// has: dropping one is a privilege the remount would otherwise need.
func remountReadOnly(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	return unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, "")
}
