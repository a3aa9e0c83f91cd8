package controllermanager

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

func TestWorkqueueMetricsUseKubeNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterWorkqueueMetrics(reg)
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "test_queue"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	want := `
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="test_queue"} 2
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="test_queue"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "workqueue_adds_total", "workqueue_depth"); err != nil {
		t.Error(err)
	}
}
