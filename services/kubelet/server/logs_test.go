package server

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"skiff.dev/services/cri/criolog"

	"k8s.io/apimachinery/pkg/util/wait"
)

// writeLog writes a CRI log with the given stdout lines, one second apart,
// the last one now, and returns its path.
func writeLog(t *testing.T, lines ...string) string {
	t.Helper()
	path := t.TempDir() + "/0.log"
	f, err := criolog.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := time.Now()
	for i, l := range lines {
		at := now.Add(time.Duration(i-len(lines)+1) * time.Second)
		if err := f.Write(at, criolog.Stdout, criolog.Full, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func notRunning(context.Context) bool { return false }

func TestReadLogs(t *testing.T) {
	path := writeLog(t, "one", "two", "three")
	tests := []struct {
		name string
		opts logOptions
		want string
	}{
		{"everything", logOptions{tailLines: -1}, "one\ntwo\nthree\n"},
		{"tailLines=2", logOptions{tailLines: 2}, "two\nthree\n"},
		{"tailLines=0", logOptions{tailLines: 0}, ""},
		{"tailLines beyond the log", logOptions{tailLines: 10}, "one\ntwo\nthree\n"},
		{"limitBytes cuts mid-line", logOptions{tailLines: -1, limitBytes: 6}, "one\ntw"},
		{"sinceSeconds", logOptions{tailLines: -1, since: time.Now().Add(-1500 * time.Millisecond)}, "two\nthree\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			err = readLogs(context.Background(), f, tc.opts, &out, notRunning)
			if err != nil && err != errLimitReached {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestReadLogsTimestamps(t *testing.T) {
	path := writeLog(t, "one")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := readLogs(context.Background(), f, logOptions{tailLines: -1, timestamps: true}, &out, notRunning); err != nil {
		t.Fatal(err)
	}
	ts, rest, _ := strings.Cut(out.String(), " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || rest != "one\n" {
		t.Errorf("got %q, want an RFC 3339 timestamp, a space and the line", out.String())
	}
}

// TestFollowEndsWhenTheContainerStops pins that follow streams lines written
// after it started and returns, with the last lines, once the container is
// no longer running.
func TestFollowEndsWhenTheContainerStops(t *testing.T) {
	path := writeLog(t, "before")
	log, err := criolog.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	running := make(chan bool, 1)
	running <- true
	isRunning := func(context.Context) bool {
		select {
		case v := <-running:
			running <- v
			return v
		default:
			return true
		}
	}
	pr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- readLogs(context.Background(), r, logOptions{tailLines: -1, follow: true}, pr, isRunning)
	}()
	_ = log.WriteString(criolog.Stdout, "after\n")
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(pr.String(), "after\n"), nil
	}); err != nil {
		t.Fatalf("followed %q, want the new line", pr.String())
	}
	_ = log.WriteString(criolog.Stdout, "last\n")
	<-running
	running <- false
	select {
	case err := <-done:
		if err != nil || pr.String() != "before\nafter\nlast\n" {
			t.Errorf("got %q, %v, want before, after and last", pr.String(), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the container stopped")
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
