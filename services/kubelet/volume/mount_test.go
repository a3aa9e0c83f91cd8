package volume

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestDirMounterMountsNothing: a hollow node's memory-backed volume is a plain directory
// that TearDownDir removes with its content.
func TestDirMounterMountsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes", "kubernetes.io~projected", "token")
	m := DirMounter{}
	if err := m.SetUpTmpfs(dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	if mounted, err := IsTmpfsMountPoint(dir); err != nil || mounted {
		t.Fatalf("IsTmpfsMountPoint = %v, %v; want a plain directory", mounted, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.TearDownDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after TearDownDir: %v, want the directory gone", err)
	}
	if err := m.TearDownDir(dir); err != nil {
		t.Errorf("TearDownDir of a missing directory: %v", err)
	}
}
