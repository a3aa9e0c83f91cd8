package controllermanager

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	// Every client-go work queue of the process reports kube's workqueue_* metrics
	// (workqueue_depth, workqueue_adds_total, ...; labelled by queue name) to
	// component-base's registry, as in kube-controller-manager. client-go takes one
	// provider per process, and k8s.io/apiserver's libraries install this one where the
	// apiserver is linked too (the all-in-one): importing it here makes it the one
	// everywhere.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// WorkqueueMetrics gathers the work queues' metrics from component-base's registry, where
// they are kept; serve it beside the controller manager's own registry
// (prometheus.Gatherers).
var WorkqueueMetrics prometheus.Gatherer = workqueueGatherer{}

// workqueueGatherer is component-base's registry cut to the workqueue_ families (it
// holds Go and process collectors too, which every skiff registry has already).
type workqueueGatherer struct{}

func (workqueueGatherer) Gather() ([]*dto.MetricFamily, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	kept := families[:0]
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "workqueue_") {
			kept = append(kept, f)
		}
	}
	return kept, err
}
