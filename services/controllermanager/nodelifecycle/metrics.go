package nodelifecycle

import "github.com/prometheus/client_golang/prometheus"

// metrics are kube's node_collector_* series.
type metrics struct {
	zoneHealth, zoneSize, unhealthyNodes *prometheus.GaugeVec
	evictions                            *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		zoneHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "zone_health",
			Help: "Percentage of healthy nodes in every zone."}, []string{"zone"}),
		zoneSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "zone_size",
			Help: "Number of nodes in the given zone."}, []string{"zone"}),
		unhealthyNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "unhealthy_nodes_in_zone",
			Help: "Number of not Ready nodes in the given zone."}, []string{"zone"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "node_collector", Name: "evictions_total",
			Help: "Number of nodes tainted NoExecute (their pods evicted) since this instance started."}, []string{"zone"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.zoneHealth, m.zoneSize, m.unhealthyNodes, m.evictions}
}

func (m *metrics) forgetZone(zone string) {
	m.zoneHealth.DeleteLabelValues(zone)
	m.zoneSize.DeleteLabelValues(zone)
	m.unhealthyNodes.DeleteLabelValues(zone)
}
