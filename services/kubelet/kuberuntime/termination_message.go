package kuberuntime

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
)

// Limits of a termination message, kube's: at most 4096 bytes of the file
// (MaxContainerTerminationMessageLength), and with FallbackToLogsOnError at most
// the last 80 lines and 2048 bytes of the log
// (MaxContainerTerminationMessageLogLines, ...LogLength).
const (
	maxTerminationMessageLength   = 4096
	maxTerminationMessageLogLines = 80
	maxTerminationMessageLogBytes = 2048
)

// terminationMessageMount makes the file c writes its termination message to, a
// new one for each attempt under podContainerDir (<root>/pods/<uid>/containers/
// <name>), mode 0666 so that a container running as any user can write it, and
// returns its mount at c's terminationMessagePath; nil when c has no such path or
// the kubelet gave no directory. Mirrors kuberuntime's makeMounts.
func terminationMessageMount(c *v1.Container, podContainerDir string) (*runtimeapi.Mount, error) {
	if c.TerminationMessagePath == "" || podContainerDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(podContainerDir, 0o750); err != nil {
		return nil, fmt.Errorf("create termination message directory: %w", err)
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	path := filepath.Join(podContainerDir, hex.EncodeToString(id))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("create termination message file: %w", err)
	}
	f.Close()
	// The umask took bits off the mode OpenFile asked for.
	if err := os.Chmod(path, 0o666); err != nil {
		return nil, fmt.Errorf("create termination message file: %w", err)
	}
	return &runtimeapi.Mount{HostPath: path, ContainerPath: c.TerminationMessagePath}, nil
}

// terminationMessage is what an exited container leaves as its termination
// message: the file mounted at its terminationMessagePath (at most 4096 bytes);
// with policy FallbackToLogsOnError, when that is empty and the container failed,
// the tail of its log. Mirrors kuberuntime's getTerminationMessage and
// readLastStringFromContainerLogs.
func terminationMessage(s *runtimeapi.ContainerStatus) string {
	annotations := s.GetAnnotations()
	path := annotations[containerTerminationMessagePathLabel]
	fallback := v1.TerminationMessagePolicy(annotations[containerTerminationMessagePolicyLabel]) == v1.TerminationMessageFallbackToLogsOnError &&
		s.GetExitCode() != 0
	message, checkLogs := "", fallback
	for _, m := range s.GetMounts() {
		if path == "" || m.GetContainerPath() != path {
			continue
		}
		data, err := readAtMost(m.GetHostPath(), maxTerminationMessageLength)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Sprintf("Error on reading termination log %s: %v", m.GetHostPath(), err)
		}
		message, checkLogs = string(data), fallback && len(data) == 0
		break
	}
	if checkLogs && s.GetLogPath() != "" {
		return logTail(s.GetLogPath(), maxTerminationMessageLogLines, maxTerminationMessageLogBytes)
	}
	return message
}

// readAtMost reads the first max bytes of path.
func readAtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// logTail is the content of the last lines of a CRI log file, at most maxBytes of
// it (the newest), "" when it cannot be read.
func logTail(path string, lines int, maxBytes int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var tail [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var partial []byte
	for sc.Scan() {
		e, err := criolog.ParseLine(sc.Bytes())
		if err != nil {
			continue
		}
		partial = append(partial, e.Content...)
		if e.Tag == criolog.Partial {
			continue
		}
		tail = append(tail, append(partial, '\n'))
		partial = nil
		if len(tail) > lines {
			tail = tail[1:]
		}
	}
	if partial != nil {
		// The log ends mid-line (a last write without a newline): that too.
		tail = append(tail, partial)
		if len(tail) > lines {
			tail = tail[1:]
		}
	}
	out := bytes.Join(tail, nil)
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return string(out)
}
