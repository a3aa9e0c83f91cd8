package scheduler

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// statusWrites records every write to a pods/status subresource: method and
// Content-Type.
type statusWrites struct {
	mu     sync.Mutex
	writes []string
	next   http.RoundTripper
}

func (s *statusWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/status") && strings.Contains(req.URL.Path, "/pods/") {
		s.mu.Lock()
		s.writes = append(s.writes, req.Method+" "+req.Header.Get("Content-Type"))
		s.mu.Unlock()
	}
	return s.next.RoundTrip(req)
}

// TestPodScheduledConditionIsAStrategicMergePatch pins that the scheduler
// writes PodScheduled=False with a strategic-merge PATCH computed against
// its (possibly stale) copy: a condition another writer added meanwhile is
// kept, and no resourceVersion conflict arises, which an UpdateStatus of the
// stale copy could not achieve.
func TestPodScheduledConditionIsAStrategicMergePatch(t *testing.T) {
	_, srv := newServer(t, testPod("p", "1"))
	rec := &statusWrites{}
	cfg := rest.CopyConfig(srv.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	client := kubernetes.NewForConfigOrDie(cfg)
	s, err := newScheduler(Config{Client: client, SchedulerName: DefaultSchedulerName}, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stale, err := getPod(client, "p")
	if err != nil {
		t.Fatal(err)
	}

	// Another writer (a kubelet, say) adds a condition after our snapshot.
	other := stale.DeepCopy()
	other.Status.Conditions = append(other.Status.Conditions, v1.PodCondition{Type: "example.com/Other", Status: v1.ConditionTrue})
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.writes = nil
	rec.mu.Unlock()

	cond := &v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/0 nodes"}
	if err := s.patchPodScheduledCondition(ctx, stale, cond, ""); err != nil {
		t.Fatalf("patchPodScheduledCondition: %v", err)
	}
	got, err := getPod(client, "p")
	if err != nil {
		t.Fatal(err)
	}
	if c := podScheduledCondition(got); c == nil || c.Status != v1.ConditionFalse || c.Reason != v1.PodReasonUnschedulable || c.Message != "0/0 nodes" {
		t.Errorf("PodScheduled condition = %+v, want False/Unschedulable/0/0 nodes", c)
	}
	kept := false
	for _, c := range got.Status.Conditions {
		kept = kept || c.Type == "example.com/Other"
	}
	if !kept {
		t.Errorf("the other writer's condition was dropped: %+v", got.Status.Conditions)
	}
	rec.mu.Lock()
	writes := append([]string(nil), rec.writes...)
	rec.mu.Unlock()
	if len(writes) != 1 || writes[0] != "PATCH application/strategic-merge-patch+json" {
		t.Errorf("status writes = %q, want exactly one strategic-merge PATCH", writes)
	}

	// The same condition again is already there: nothing is sent.
	if err := s.patchPodScheduledCondition(ctx, got, cond, ""); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.writes) != 1 {
		t.Errorf("an unchanged condition was written again: %q", rec.writes)
	}
}
