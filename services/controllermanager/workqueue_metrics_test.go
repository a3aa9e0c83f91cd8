package controllermanager

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// TestWorkqueueMetricsUseKubeNames: a work queue's adds and depth reach WorkqueueMetrics
// under kube's names, labelled by the queue's name.
func TestWorkqueueMetricsUseKubeNames(t *testing.T) {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "test_queue"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	families, err := WorkqueueMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "test_queue" {
					got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["workqueue_adds_total"] != 2 || got["workqueue_depth"] != 2 {
		t.Errorf("test_queue's metrics = %v, want workqueue_adds_total and workqueue_depth 2", got)
	}
	for name := range got {
		if name[:10] != "workqueue_" {
			t.Errorf("gathered %s, want workqueue_ families only", name)
		}
	}
}
