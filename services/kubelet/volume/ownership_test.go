package volume

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestSetVolumeOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to another needs root")
	}
	const fsGroup = 4242
	tests := []struct {
		name              string
		readOnly          bool
		wantFile, wantDir fs.FileMode
	}{
		{"read-write volume: group read and write, setgid directories", false, 0o660, 0o770 | fs.ModeSetgid},
		{"read-only volume: group read only", true, 0o640, 0o750 | fs.ModeSetgid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "f")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			if err := SetVolumeOwnership(dir, fsGroup, tt.readOnly, nil); err != nil {
				t.Fatal(err)
			}
			for path, want := range map[string]fs.FileMode{file: tt.wantFile, dir: tt.wantDir} {
				info, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if info.Sys().(*syscall.Stat_t).Gid != fsGroup {
					t.Errorf("%s group = %d, want %d", path, info.Sys().(*syscall.Stat_t).Gid, fsGroup)
				}
				if got := info.Mode() & (fs.ModePerm | fs.ModeSetgid); got != want {
					t.Errorf("%s mode = %v, want %v", path, got, want)
				}
			}
			if info, _ := os.Stat("/etc/passwd"); info.Sys().(*syscall.Stat_t).Gid == fsGroup {
				t.Error("a symlink was followed out of the volume")
			}
		})
	}
}

func TestSetVolumeOwnershipOnRootMismatchSkipsAMatchingRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to another needs root")
	}
	dir := t.TempDir()
	if err := SetVolumeOwnership(dir, 4242, false, nil); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "later")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, -1, 0); err != nil {
		t.Fatal(err)
	}
	policy := v1.FSGroupChangeOnRootMismatch
	if err := SetVolumeOwnership(dir, 4242, false, &policy); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(file); info.Sys().(*syscall.Stat_t).Gid != 0 {
		t.Error("OnRootMismatch walked a volume whose root already matched")
	}
	always := v1.FSGroupChangeAlways
	if err := SetVolumeOwnership(dir, 4242, false, &always); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(file); info.Sys().(*syscall.Stat_t).Gid != 4242 {
		t.Error("Always did not re-group every file")
	}
}
