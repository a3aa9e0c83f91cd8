// Package metrics defines the scheduler's Prometheus metrics, one set per
// Scheduler (never registered globally, so several schedulers can share a
// process). Names and labels mirror kube-scheduler's pkg/scheduler/metrics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a scheduling attempt, the "result" label.
const (
	Scheduled     = "scheduled"
	Unschedulable = "unschedulable"
	Error         = "error"
)

// Metrics are one scheduler's metrics. It is a prometheus.Collector; the
// binary registers it on the /metrics registry.
type Metrics struct {
	// ScheduleAttempts counts attempts by result and profile
	// (scheduler_schedule_attempts_total).
	ScheduleAttempts *prometheus.CounterVec
	// AttemptDuration observes each attempt's duration in seconds, from pop
	// to bind or failure (scheduler_scheduling_attempt_duration_seconds).
	AttemptDuration *prometheus.HistogramVec
	pendingPods     *prometheus.Desc
	pending         func() (active, backoff, unschedulable int)
}

// New returns the metrics; pending reports the scheduling queue's lengths
// for scheduler_pending_pods{queue}.
func New(pending func() (active, backoff, unschedulable int)) *Metrics {
	return &Metrics{
		ScheduleAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "scheduler",
			Name:      "schedule_attempts_total",
			Help:      "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
		}, []string{"result", "profile"}),
		AttemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "scheduler",
			Name:      "scheduling_attempt_duration_seconds",
			Help:      "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
			Buckets:   prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"result", "profile"}),
		pendingPods: prometheus.NewDesc("scheduler_pending_pods",
			"Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods.",
			[]string{"queue"}, nil),
		pending: pending,
	}
}

// Observe records one attempt that ended with result after started.
func (m *Metrics) Observe(result, profile string, started time.Time) {
	m.ScheduleAttempts.WithLabelValues(result, profile).Inc()
	m.AttemptDuration.WithLabelValues(result, profile).Observe(time.Since(started).Seconds())
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.ScheduleAttempts.Describe(ch)
	m.AttemptDuration.Describe(ch)
	ch <- m.pendingPods
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.ScheduleAttempts.Collect(ch)
	m.AttemptDuration.Collect(ch)
	active, backoff, unschedulable := m.pending()
	ch <- prometheus.MustNewConstMetric(m.pendingPods, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(m.pendingPods, prometheus.GaugeValue, float64(backoff), "backoff")
	ch <- prometheus.MustNewConstMetric(m.pendingPods, prometheus.GaugeValue, float64(unschedulable), "unschedulable")
}
