package server

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/cri/criolog"
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

// TestLogContainerIDFollowsKubesChoice pins which instance `kubectl logs` and
// `kubectl logs --previous` read, from the container's status as kube's kubelet chooses
// it; a runtime's list of instances cannot, since garbage collection keeps only the last
// exited one.
func TestLogContainerIDFollowsKubesChoice(t *testing.T) {
	terminated := func(id string) *v1.ContainerStateTerminated {
		return &v1.ContainerStateTerminated{ExitCode: 1, ContainerID: id}
	}
	running := v1.ContainerStatus{Name: "c", ContainerID: "sim://run3",
		State:                v1.ContainerState{Running: &v1.ContainerStateRunning{}},
		LastTerminationState: v1.ContainerState{Terminated: terminated("sim://run2")}}
	crashLooping := v1.ContainerStatus{Name: "c",
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: terminated("sim://run2")}}
	exited := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Terminated: terminated("sim://run1")}}
	creating := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	for _, tc := range []struct {
		name     string
		status   v1.PodStatus
		previous bool
		want     string // an ID, or the error's text
	}{
		{"running", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running}}, false, "run3"},
		{"running, previous", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running}}, true, "run2"},
		{"crash-looping", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{crashLooping}}, false, "run2"},
		{"crash-looping, previous", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{crashLooping}}, true, "run2"},
		{"exited once", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited}}, false, "run1"},
		{"exited once, previous", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{exited}}, true,
			`previous terminated container "c" in pod "p" not found`},
		{"init container", v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{exited}}, false, "run1"},
		{"creating", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{creating}}, false,
			`container "c" in pod "p" is waiting to start: ContainerCreating`},
		{"no status yet", v1.PodStatus{}, false, `container "c" in pod "p" is waiting to start: ContainerCreating`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := logContainerID("p", tc.status, "c", tc.previous)
			got := id
			if err != nil {
				if !apierrors.IsBadRequest(err) {
					t.Errorf("error %v is not a 400", err)
				}
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
