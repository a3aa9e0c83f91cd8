package csrsigner

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
)

var labelsEverything = labels.Everything()

// metrics are the csr-signer's Prometheus metrics, collected as one Collector.
type metrics struct {
	approved    *prometheus.CounterVec
	leftPending *prometheus.CounterVec
	signed      *prometheus.CounterVec
	failed      *prometheus.CounterVec
	syncErrors  prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		approved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csrsigner_approved_total", Help: "Requests auto-approved, by signer.",
		}, []string{"signer"}),
		leftPending: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csrsigner_left_pending_total", Help: "Approver decisions that left a request for a person, by signer.",
		}, []string{"signer"}),
		signed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csrsigner_signed_total", Help: "Certificates issued, by signer.",
		}, []string{"signer"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csrsigner_failed_total", Help: "Approved requests marked Failed, by signer and reason.",
		}, []string{"signer", "reason"}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "csrsigner_sync_errors_total", Help: "Handlings that failed and were retried with backoff.",
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.approved, m.leftPending, m.signed, m.failed, m.syncErrors}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
