package proxy

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// boundedFrequencyRunner is kube's async.BoundedFrequencyRunner: Run asks for fn to
// run; fn runs at most once per minInterval however often it is asked, and at least
// once per maxInterval even when nobody asks. Requests made while fn runs are folded
// into one more run.
type boundedFrequencyRunner struct {
	fn          func(context.Context)
	minInterval time.Duration
	maxInterval time.Duration
	requests    chan struct{}
}

func newBoundedFrequencyRunner(fn func(context.Context), minInterval, maxInterval time.Duration) *boundedFrequencyRunner {
	return &boundedFrequencyRunner{fn: fn, minInterval: minInterval, maxInterval: maxInterval, requests: make(chan struct{}, 1)}
}

// Run asks for a run; it never blocks.
func (r *boundedFrequencyRunner) Run() {
	select {
	case r.requests <- struct{}{}:
	default: // one is already pending
	}
}

// Loop runs fn once at once, then as asked and bounded, until ctx ends.
func (r *boundedFrequencyRunner) Loop(ctx context.Context) {
	var last time.Time
	periodic := time.NewTimer(0)
	defer periodic.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.requests:
		case <-periodic.C:
		}
		if wait := r.minInterval - time.Since(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		select { // requests made until now are served by this run
		case <-r.requests:
		default:
		}
		last = time.Now()
		r.fn(ctx)
		periodic.Reset(r.maxInterval)
	}
}

// metrics are kube-proxy's sync metrics (pkg/proxy/metrics).
type metrics struct {
	syncDuration prometheus.Histogram
	lastSync     prometheus.Gauge
	syncFailures prometheus.Counter
	services     prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "kubeproxy", Subsystem: "sync_proxy_rules", Name: "duration_seconds",
			Help: "SyncProxyRules latency in seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kubeproxy", Subsystem: "sync_proxy_rules", Name: "last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced"}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "kubeproxy", Subsystem: "sync_proxy_rules", Name: "nftables_sync_failures_total",
			Help: "Number of times the nftables transaction failed"}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kubeproxy", Subsystem: "sync_proxy_rules", Name: "service_ports_total",
			Help: "Number of Service ports the last successful sync programmed"}),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.syncDuration.Describe(ch)
	m.lastSync.Describe(ch)
	m.syncFailures.Describe(ch)
	m.services.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.syncDuration.Collect(ch)
	m.lastSync.Collect(ch)
	m.syncFailures.Collect(ch)
	m.services.Collect(ch)
}
