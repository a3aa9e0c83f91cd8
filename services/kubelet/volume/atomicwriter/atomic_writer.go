// Package atomicwriter writes a set of files into a volume directory so that
// readers see either the whole old set or the whole new set, never a mix or
// a half-written file: how configMap, secret, downwardAPI and projected
// volumes are updated under running containers. Mirrors k8s.io/kubernetes
// pkg/volume/util/atomic_writer.go.
//
// The layout, as kube's:
//
//	<target>/..data            -> ..2026_11_23_18_30_00.123456789  (symlink)
//	<target>/..2026_11_23_…    the files of the current payload
//	<target>/<key>             -> ..data/<key>                       (symlink)
//
// A write fills a new timestamped directory, then swaps ..data to it with one
// rename(2) (atomic), then removes the old directory and the top-level links
// of paths no longer in the payload.
package atomicwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	maxFileNameLen = 255
	maxPathLen     = 4096
)

// FileProjection is one file of a payload: its content and permission bits.
type FileProjection struct {
	Data []byte
	Mode int32
}

// AtomicWriter writes payloads into one target directory. One writer per
// directory: concurrent Writes to the same directory are not safe.
type AtomicWriter struct {
	targetDir string
}

// New returns a writer for targetDir, which must exist.
func New(targetDir string) *AtomicWriter {
	return &AtomicWriter{targetDir: targetDir}
}

// Write makes targetDir hold exactly payload (relative path → file): nothing
// is written when the files already match (content and mode). Paths must be
// relative, without ".." elements, and not start with "..". Errors name the
// step that failed; the previous content stays visible after a failure.
// Mirrors AtomicWriter.Write.
func (w *AtomicWriter) Write(payload map[string]FileProjection) error {
	clean, err := validatePayload(payload)
	if err != nil {
		return err
	}
	dataDirPath := filepath.Join(w.targetDir, dataDirName)
	oldTsDir, err := os.Readlink(dataDirPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read link %s: %w", dataDirPath, err)
	}
	oldTsPath := ""
	if oldTsDir != "" {
		oldTsPath = filepath.Join(w.targetDir, oldTsDir)
		same, err := sameContent(oldTsPath, clean)
		if err != nil {
			return err
		}
		if same {
			// Still make sure every visible link exists (a crash between
			// the swap and the links would have left some out).
			return w.createUserVisibleFiles(clean)
		}
	}
	oldPaths, err := listPaths(oldTsPath)
	if err != nil {
		return err
	}

	tsDir, err := os.MkdirTemp(w.targetDir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return fmt.Errorf("create timestamped directory: %w", err)
	}
	// MkdirTemp makes it 0700; readers in containers run as any user.
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", tsDir, err)
	}
	if err := writePayloadToDir(clean, tsDir); err != nil {
		_ = os.RemoveAll(tsDir)
		return err
	}

	newDataDirPath := filepath.Join(w.targetDir, newDataDirName)
	_ = os.Remove(newDataDirPath)
	if err := os.Symlink(filepath.Base(tsDir), newDataDirPath); err != nil {
		_ = os.RemoveAll(tsDir)
		return fmt.Errorf("create %s: %w", newDataDirPath, err)
	}
	if err := os.Rename(newDataDirPath, dataDirPath); err != nil {
		_ = os.Remove(newDataDirPath)
		_ = os.RemoveAll(tsDir)
		return fmt.Errorf("swap %s: %w", dataDirPath, err)
	}

	if err := w.createUserVisibleFiles(clean); err != nil {
		return err
	}
	if err := w.removeUserVisiblePaths(oldPaths, clean); err != nil {
		return err
	}
	if oldTsPath != "" {
		if err := os.RemoveAll(oldTsPath); err != nil {
			return fmt.Errorf("remove old data directory %s: %w", oldTsPath, err)
		}
	}
	return nil
}

// validatePayload checks every path and returns the payload keyed by the
// cleaned paths.
func validatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for p, content := range payload {
		if err := validatePath(p); err != nil {
			return nil, err
		}
		clean[filepath.Clean(p)] = content
	}
	return clean, nil
}

// validatePath refuses paths that could leave the target directory or clash
// with the writer's own names. Mirrors atomic_writer's validatePath.
func validatePath(p string) error {
	if p == "" {
		return errors.New("invalid path: must not be empty")
	}
	if len(p) > maxPathLen {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLen)
	}
	if filepath.IsAbs(p) {
		return errors.New("invalid path: must be relative path")
	}
	for _, item := range strings.Split(p, string(os.PathSeparator)) {
		if item == ".." {
			return errors.New("invalid path: must not contain '..'")
		}
		if len(item) > maxFileNameLen {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLen)
		}
	}
	if strings.HasPrefix(p, "..") {
		return errors.New("invalid path: must not start with '..'")
	}
	return nil
}

// sameContent reports whether dir holds exactly payload.
func sameContent(dir string, payload map[string]FileProjection) (bool, error) {
	existing, err := listPaths(dir)
	if err != nil {
		return false, err
	}
	if len(existing) != len(payload) {
		return false, nil
	}
	for p, want := range payload {
		path := filepath.Join(dir, p)
		info, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("stat %s: %w", path, err)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != fs.FileMode(want.Mode).Perm() {
			return false, nil
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", path, err)
		}
		if !bytes.Equal(got, want.Data) {
			return false, nil
		}
	}
	return true, nil
}

// listPaths returns the relative paths of the regular files under dir
// ("" or a missing dir: none).
func listPaths(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return paths, nil
}

// writePayloadToDir writes each file (and its parent directories) under dir.
func writePayloadToDir(payload map[string]FileProjection, dir string) error {
	for p, content := range payload {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", p, err)
		}
		mode := fs.FileMode(content.Mode).Perm()
		if err := os.WriteFile(path, content.Data, mode); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		// WriteFile's mode passes through the umask; the payload's is exact.
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return nil
}

// createUserVisibleFiles links each top-level name of the payload to
// ..data/<name>.
func (w *AtomicWriter) createUserVisibleFiles(payload map[string]FileProjection) error {
	for p := range payload {
		top := strings.SplitN(p, string(os.PathSeparator), 2)[0]
		visible := filepath.Join(w.targetDir, top)
		if _, err := os.Lstat(visible); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat %s: %w", visible, err)
		}
		if err := os.Symlink(filepath.Join(dataDirName, top), visible); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("link %s: %w", visible, err)
		}
	}
	return nil
}

// removeUserVisiblePaths removes the top-level links of old paths whose top
// name no payload path uses any more.
func (w *AtomicWriter) removeUserVisiblePaths(oldPaths []string, payload map[string]FileProjection) error {
	keep := map[string]bool{}
	for p := range payload {
		keep[strings.SplitN(p, string(os.PathSeparator), 2)[0]] = true
	}
	var tops []string
	for _, p := range oldPaths {
		top := strings.SplitN(p, string(os.PathSeparator), 2)[0]
		if !keep[top] && !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	for _, top := range tops {
		if err := os.Remove(filepath.Join(w.targetDir, top)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", top, err)
		}
	}
	return nil
}
