package controllermanager

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// workqueueMetrics are client-go work queues' metrics under kube's names (workqueue_depth,
// workqueue_adds_total, ...; k8s.io/component-base/metrics/prometheus/workqueue),
// labelled by queue name.
type workqueueMetrics struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	latency, workDuration             *prometheus.HistogramVec
}

var setWorkqueueProvider sync.Once

// RegisterWorkqueueMetrics makes every client-go work queue created afterwards in this
// process report to r. client-go takes one provider per process: only the first call
// has an effect. Call it before building the controllers.
func RegisterWorkqueueMetrics(r prometheus.Registerer) {
	setWorkqueueProvider.Do(func() {
		buckets := prometheus.ExponentialBuckets(10e-9, 10, 12) // 10 ns to 1000 s
		m := &workqueueMetrics{
			depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth",
				Help: "Current depth of workqueue"}, []string{"name"}),
			adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total",
				Help: "Total number of adds handled by workqueue"}, []string{"name"}),
			latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds",
				Help: "How long in seconds an item stays in workqueue before being requested.", Buckets: buckets}, []string{"name"}),
			workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds",
				Help: "How long in seconds processing an item from workqueue takes.", Buckets: buckets}, []string{"name"}),
			unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds",
				Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration."}, []string{"name"}),
			longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds",
				Help: "How many seconds has the longest running processor for workqueue been running."}, []string{"name"}),
			retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total",
				Help: "Total number of retries handled by workqueue"}, []string{"name"}),
		}
		_ = register(r, m.depth, m.adds, m.latency, m.workDuration, m.unfinished, m.longestRunning, m.retries)
		workqueue.SetProvider(m)
	})
}

func (m *workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}

func (m *workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}

func (m *workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}

func (m *workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.workDuration.WithLabelValues(name)
}

func (m *workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}

func (m *workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longestRunning.WithLabelValues(name)
}

func (m *workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
