package eventrecorder

import (
	"context"
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
// that is not being delivered: an event whose delivery is under way is counted sent
// once it arrives, never also dropped. The apiserver is an HTTP server on loopback that
// holds the first event's POST until the buffer has overflowed.
func TestFullBufferKeepsTheEventsInFlight(t *testing.T) {
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
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Component: "kubelet", Client: client, BufferSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	stop := r.Start()
	t.Cleanup(stop)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	r.Event(pod, corev1.EventTypeNormal, "First", "first")
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first event was never posted")
	}
	// The buffer holds First (in flight) and Second; Third overflows it.
	r.Event(pod, corev1.EventTypeNormal, "Second", "second")
	r.Event(pod, corev1.EventTypeNormal, "Third", "third")
	if r.Dropped() != 1 || r.Pending() != 2 {
		t.Fatalf("dropped %d, pending %d; want 1 and 2", r.Dropped(), r.Pending())
	}
	close(release)
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.Pending() == 0, nil
	}); err != nil {
		t.Fatalf("%d events still undelivered", r.Pending())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || !strings.Contains(got[0], "first") || !strings.Contains(got[1], "third") {
		t.Fatalf("posted %d events %q; want First then Third", len(got), got)
	}
	if sent := testutil.ToFloat64(r.sent); sent != 2 {
		t.Fatalf("sent %v; want 2 (three recorded, one dropped)", sent)
	}
}
