package hostpath

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestSetUpChecksType(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name     string
		path     string
		pathType v1.HostPathType
		wantErr  string // "" means success
		check    func(t *testing.T, path string)
	}{
		{name: "unset accepts anything, even nothing", path: missing, pathType: v1.HostPathUnset},
		{name: "DirectoryOrCreate creates a 0755 directory", path: filepath.Join(dir, "new/dir"), pathType: v1.HostPathDirectoryOrCreate,
			check: func(t *testing.T, p string) {
				if info, err := os.Stat(p); err != nil || !info.IsDir() || info.Mode().Perm() != 0o755 {
					t.Errorf("stat = %v, %v; want a 0755 directory", info, err)
				}
			}},
		{name: "DirectoryOrCreate refuses a file", path: file, pathType: v1.HostPathDirectoryOrCreate, wantErr: "is not a directory"},
		{name: "Directory accepts a directory", path: dir, pathType: v1.HostPathDirectory},
		{name: "Directory refuses a missing path", path: missing, pathType: v1.HostPathDirectory, wantErr: "is not a directory"},
		{name: "FileOrCreate creates an empty 0644 file", path: filepath.Join(dir, "created"), pathType: v1.HostPathFileOrCreate,
			check: func(t *testing.T, p string) {
				if info, err := os.Stat(p); err != nil || !info.Mode().IsRegular() || info.Size() != 0 {
					t.Errorf("stat = %v, %v; want an empty file", info, err)
				}
			}},
		{name: "FileOrCreate refuses a directory", path: dir, pathType: v1.HostPathFileOrCreate, wantErr: "is not a file"},
		{name: "File accepts a file", path: file, pathType: v1.HostPathFile},
		{name: "File refuses a missing path", path: missing, pathType: v1.HostPathFile, wantErr: "is not a file"},
		{name: "Socket accepts a socket", path: sock, pathType: v1.HostPathSocket},
		{name: "Socket refuses a file", path: file, pathType: v1.HostPathSocket, wantErr: "is not a socket file"},
		{name: "CharDevice accepts /dev/null", path: "/dev/null", pathType: v1.HostPathCharDev},
		{name: "CharDevice refuses a file", path: file, pathType: v1.HostPathCharDev, wantErr: "is not a character device"},
		{name: "BlockDevice refuses a character device", path: "/dev/null", pathType: v1.HostPathBlockDev, wantErr: "is not a block device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pt := tt.pathType
			m, err := NewPlugin().NewMounter(&v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: tt.path, Type: &pt}}}, &v1.Pod{})
			if err != nil {
				t.Fatal(err)
			}
			if m.GetPath() != tt.path {
				t.Errorf("path = %s, want %s", m.GetPath(), tt.path)
			}
			err = m.SetUp(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("SetUp: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("SetUp err = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, tt.path)
			}
		})
	}
}

func TestNewMounterRefusesRelativePath(t *testing.T) {
	if _, err := NewPlugin().NewMounter(&v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "var/log"}}}, &v1.Pod{}); err == nil {
		t.Error("a relative hostPath was accepted")
	}
}
