package eventrecorder

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestFullBufferKeepsTheEventsInFlight pins that a full buffer drops the oldest event
// that is not being delivered, or the new one when every buffered event is: an event
// whose delivery is under way is counted sent once it arrives, never also dropped. The
// apiserver is an HTTP server on loopback that holds the first event's POST until the
// buffer has overflowed.
func TestFullBufferKeepsTheEventsInFlight(t *testing.T) {
	for _, tc := range []struct {
		bufferSize int
		dropped    int64
		pending    int // while First is in flight
		posted     []string
	}{
		// First (in flight) and Second fill it; Third drops Second.
		{bufferSize: 2, dropped: 1, pending: 2, posted: []string{"first", "third"}},
		// First (in flight) fills it; Second and Third are dropped as they come.
		{bufferSize: 1, dropped: 2, pending: 1, posted: []string{"first"}},
	} {
		t.Run(fmt.Sprintf("buffer of %d", tc.bufferSize), func(t *testing.T) {
			got, sent := overflowWhileDelivering(t, tc.bufferSize, tc.dropped, tc.pending)
			if len(got) != len(tc.posted) {
				t.Fatalf("posted %d events %q; want %q", len(got), got, tc.posted)
			}
			for i, msg := range tc.posted {
				if !strings.Contains(got[i], msg) {
					t.Fatalf("posted %q; want %q in that order", got, tc.posted)
				}
			}
			if want := float64(len(tc.posted)); sent != want {
				t.Fatalf("sent %v; want %v (three recorded, %d dropped)", sent, want, tc.dropped)
			}
		})
	}
}

// overflowWhileDelivering records First, Second and Third on a recorder of bufferSize
// while First's POST is held, checks the dropped and pending counts at that moment, lets
// the POSTs through and returns the bodies posted, in order, and the sent counter.
func overflowWhileDelivering(t *testing.T, bufferSize int, dropped int64, pending int) ([]string, float64) {
	t.Helper()
	arrived, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var got []string
	first := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mu.Lock()
		hold := first
		first = false
		mu.Unlock()
		if hold {
			close(arrived)
			<-release
		}
		mu.Lock()
		got = append(got, string(body))
		mu.Unlock()
		// The event back as it came, as the apiserver answers a create.
		w.Header().Set("Content-Type", req.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Component: "kubelet", Client: client, BufferSize: bufferSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Start())
	// Cleanups run last first: a test that fails while First is held lets it through
	// before the recorder stops.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	r.Event(pod, corev1.EventTypeNormal, "First", "first")
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first event was never posted")
	}
	r.Event(pod, corev1.EventTypeNormal, "Second", "second")
	r.Event(pod, corev1.EventTypeNormal, "Third", "third")
	if r.Dropped() != dropped || r.Pending() != pending {
		t.Fatalf("dropped %d, pending %d; want %d and %d", r.Dropped(), r.Pending(), dropped, pending)
	}
	releaseOnce.Do(func() { close(release) })
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.Pending() == 0, nil
	}); err != nil {
		t.Fatalf("%d events still undelivered", r.Pending())
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]string(nil), got...), testutil.ToFloat64(r.sent)
}
