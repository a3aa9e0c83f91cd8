package eventsink

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestRepeatsOfAnEventShareAWorker pins what lets the sink fold repeats in order: every
// repeat of an event (its own name, count and times) goes to the same worker, and
// distinct events spread over the workers.
func TestRepeatsOfAnEventShareAWorker(t *testing.T) {
	event := func(pod, reason string, i int) *corev1.Event {
		at := metav1.NewTime(time.Unix(int64(1000+i), 0))
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod, i), Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod, UID: types.UID("u-" + pod)},
			Reason:         reason, Message: "Back-off restarting failed container", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "kubelet", Host: "node-a"}, Count: int32(i + 1),
			FirstTimestamp: at, LastTimestamp: at,
		}
	}
	want := shard(event("web", "BackOff", 0), sinkWorkers)
	for i := 1; i < 20; i++ {
		if got := shard(event("web", "BackOff", i), sinkWorkers); got != want {
			t.Fatalf("repeat %d went to worker %d, the first to %d", i, got, want)
		}
	}
	used := map[int]bool{}
	for i := range 64 {
		used[shard(event(fmt.Sprintf("pod-%d", i), "Started", 0), sinkWorkers)] = true
	}
	if len(used) < sinkWorkers/2 {
		t.Errorf("64 distinct events used %d of %d workers", len(used), sinkWorkers)
	}
}
