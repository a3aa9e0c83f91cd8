// Package criolog writes and reads container log files in the CRI log format,
// the format the kubelet reads for `kubectl logs`:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <F|P> <content>\n
//
// One entry per line of output; a line longer than MaxLineSize, or output that
// ends without a newline, is written as partial entries (tag P) — the rules of
// containerd's CRI plugin (pkg/cri/io/logger.go) and of the kubelet's parser
// (pkg/kubelet/kuberuntime/logs).
package criolog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Stream names the output stream an entry came from.
type Stream string

// The two streams of a container.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Tag says whether an entry ends a line (Full) or is a piece of a longer or
// unterminated one (Partial).
type Tag string

// The entry tags of the CRI log format.
const (
	Full    Tag = "F"
	Partial Tag = "P"
)

// MaxLineSize is the longest content, in bytes, of one entry; longer lines are
// split into Partial entries. It is containerd's default max_container_log_line_size.
const MaxLineSize = 16 * 1024

// File is one container's log file. Entries from several goroutines (stdout
// and stderr copiers) are written whole, one write per entry. All methods are
// safe for concurrent use, and a nil *File discards everything, so a container
// without a log path needs no special case.
type File struct {
	path string

	mu     sync.Mutex
	f      *os.File
	closed bool
}

// Open opens path for appending, creating it (mode 0640) and its directory
// (mode 0755) when missing, as containerd does for a container's log path.
func Open(path string) (*File, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &File{path: path, f: f}, nil
}

func openAppend(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	return f, nil
}

// Path returns the file's path ("" for a nil File).
func (f *File) Path() string {
	if f == nil {
		return ""
	}
	return f.path
}

// Write appends one entry stamped t. content must not contain a newline.
func (f *File) Write(t time.Time, s Stream, tag Tag, content []byte) error {
	if f == nil {
		return nil
	}
	line := make([]byte, 0, len(time.RFC3339Nano)+len(s)+len(content)+8)
	line = t.AppendFormat(line, time.RFC3339Nano)
	line = append(line, ' ')
	line = append(line, s...)
	line = append(line, ' ')
	line = append(line, tag...)
	line = append(line, ' ')
	line = append(line, content...)
	line = append(line, '\n')

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	_, err := f.f.Write(line)
	return err
}

// WriteString appends text as Full entries stamped now, one per line of text;
// a final newline is optional. It suits messages the runtime writes itself.
func (f *File) WriteString(s Stream, text string) error {
	now := time.Now()
	for line := range strings.Lines(text) {
		if err := f.Write(now, s, Full, []byte(strings.TrimSuffix(line, "\n"))); err != nil {
			return err
		}
	}
	return nil
}

// Reopen closes the file and opens its path again, creating it anew. The
// kubelet renames a log file when rotating it and then asks the runtime, through
// ReopenContainerLog, to write to a fresh file at the old path.
func (f *File) Reopen() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	nf, err := openAppend(f.path)
	if err != nil {
		return err
	}
	old := f.f
	f.f = nf
	return old.Close()
}

// Close closes the file; later writes fail with os.ErrClosed. Closing twice is
// not an error.
func (f *File) Close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return f.f.Close()
}

// Copy reads r until EOF and writes it to f as entries of stream s, each
// stamped with the time it was read: a line ending in '\n' is a Full entry
// without the newline, a line longer than MaxLineSize is split into Partial
// entries followed by a Full one, and trailing output without a newline is a
// Partial entry — as containerd's redirectLogs does. It returns nil at EOF and
// the read error otherwise; a write error stops the copy.
func Copy(f *File, s Stream, r io.Reader) error {
	br := bufio.NewReaderSize(r, MaxLineSize)
	for {
		chunk, err := br.ReadSlice('\n')
		now := time.Now()
		switch {
		case err == nil:
			if werr := f.Write(now, s, Full, chunk[:len(chunk)-1]); werr != nil {
				return werr
			}
		case errors.Is(err, bufio.ErrBufferFull):
			if werr := f.Write(now, s, Partial, chunk); werr != nil {
				return werr
			}
		default:
			if len(chunk) > 0 {
				if werr := f.Write(now, s, Partial, chunk); werr != nil {
					return werr
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Entry is one parsed log line.
type Entry struct {
	Time    time.Time
	Stream  Stream
	Tag     Tag
	Content []byte
}

// ParseLine parses one line of a CRI log file (with or without its trailing
// newline). It accepts what the kubelet's parseCRILog accepts: a tag field
// may carry further ':'-separated flags after the F/P tag.
func ParseLine(line []byte) (Entry, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	fields := bytes.SplitN(line, []byte(" "), 4)
	if len(fields) < 3 {
		return Entry{}, fmt.Errorf("parse CRI log line %q: want timestamp, stream, tag and content", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return Entry{}, fmt.Errorf("parse CRI log line %q: timestamp: %w", line, err)
	}
	s := Stream(fields[1])
	if s != Stdout && s != Stderr {
		return Entry{}, fmt.Errorf("parse CRI log line %q: unknown stream %q", line, s)
	}
	tag, _, _ := strings.Cut(string(fields[2]), ":")
	if Tag(tag) != Full && Tag(tag) != Partial {
		return Entry{}, fmt.Errorf("parse CRI log line %q: unknown tag %q", line, tag)
	}
	e := Entry{Time: t, Stream: s, Tag: Tag(tag)}
	if len(fields) == 4 {
		e.Content = fields[3]
	}
	return e, nil
}
