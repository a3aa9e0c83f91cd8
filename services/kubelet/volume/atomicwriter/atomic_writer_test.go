package atomicwriter

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func readVisible(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func timestampedDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..2") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestWriteCreatesVisibleFilesWithModes(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	err := w.Write(map[string]FileProjection{
		"config.yaml":   {Data: []byte("a: 1"), Mode: 0o644},
		"nested/secret": {Data: []byte("s3cret"), Mode: 0o400},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readVisible(t, dir, "config.yaml"); got != "a: 1" {
		t.Errorf("config.yaml = %q", got)
	}
	if got := readVisible(t, dir, "nested/secret"); got != "s3cret" {
		t.Errorf("nested/secret = %q", got)
	}
	info, err := os.Stat(filepath.Join(dir, "nested/secret"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o400 {
		t.Errorf("mode = %o, want 400", info.Mode().Perm())
	}
	if target, err := os.Readlink(filepath.Join(dir, "config.yaml")); err != nil || target != "..data/config.yaml" {
		t.Errorf("config.yaml links to %q (%v), want ..data/config.yaml", target, err)
	}
}

func TestWriteUpdateReplacesContentAndRemovesOldFiles(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	if err := w.Write(map[string]FileProjection{"keep": {Data: []byte("v1"), Mode: 0o644}, "drop": {Data: []byte("x"), Mode: 0o644}, "sub/gone": {Data: []byte("y"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	first := timestampedDirs(t, dir)
	if err := w.Write(map[string]FileProjection{"keep": {Data: []byte("v2"), Mode: 0o644}, "new": {Data: []byte("n"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if got := readVisible(t, dir, "keep"); got != "v2" {
		t.Errorf("keep = %q, want v2", got)
	}
	if got := readVisible(t, dir, "new"); got != "n" {
		t.Errorf("new = %q, want n", got)
	}
	for _, gone := range []string{"drop", "sub"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still visible after it left the payload (err %v)", gone, err)
		}
	}
	dirs := timestampedDirs(t, dir)
	if len(dirs) != 1 || dirs[0] == first[0] {
		t.Errorf("timestamped dirs = %v (before %v), want exactly one new one", dirs, first)
	}
}

func TestWriteSamePayloadKeepsDataDir(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	payload := map[string]FileProjection{"k": {Data: []byte("v"), Mode: 0o644}}
	if err := w.Write(payload); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if err := w.Write(payload); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if before != after {
		t.Errorf("..data moved from %s to %s for an identical payload", before, after)
	}
	payload["k"] = FileProjection{Data: []byte("v"), Mode: 0o600}
	if err := w.Write(payload); err != nil {
		t.Fatal(err)
	}
	if moved, _ := os.Readlink(filepath.Join(dir, dataDirName)); moved == after {
		t.Error("a mode change did not produce a new data directory")
	}
}

func TestWriteRefusesEscapingPaths(t *testing.T) {
	for _, p := range []string{"../evil", "a/../../evil", "/etc/passwd", "..data", "..hidden", ""} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			if err := New(dir).Write(map[string]FileProjection{p: {Data: []byte("x"), Mode: 0o644}}); err == nil {
				t.Errorf("Write(%q) succeeded", p)
			}
		})
	}
}

// TestReadersNeverSeeAHalfWrittenPayload reads both files of a two-file
// payload through one resolution of ..data while the writer swaps versions:
// every pair read must come from the same version, and no read may see a
// partial file.
func TestReadersNeverSeeAHalfWrittenPayload(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	version := func(i int) map[string]FileProjection {
		body := strings.Repeat(string(rune('a'+i%26)), 64<<10)
		return map[string]FileProjection{"one": {Data: []byte(body), Mode: 0o644}, "two": {Data: []byte(body), Mode: 0o644}}
	}
	if err := w.Write(version(0)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, mixed atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				ts, err := os.Readlink(filepath.Join(dir, dataDirName))
				if err != nil {
					continue
				}
				one, err1 := os.ReadFile(filepath.Join(dir, ts, "one"))
				two, err2 := os.ReadFile(filepath.Join(dir, ts, "two"))
				if err1 != nil || err2 != nil {
					// The old version was removed after the swap: the
					// reader raced the cleanup, not a half-written file.
					continue
				}
				reads.Add(1)
				if len(one) != 64<<10 || string(one) != string(two) || strings.Count(string(one), string(one[0])) != len(one) {
					mixed.Add(1)
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		if err := w.Write(version(i)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if mixed.Load() != 0 {
		t.Errorf("%d of %d reads saw a mixed or partial payload", mixed.Load(), reads.Load())
	}
	if got := readVisible(t, dir, "one"); got[0] != byte('a'+200%26) {
		t.Errorf("final content starts with %q, want the last version", got[0])
	}
}
