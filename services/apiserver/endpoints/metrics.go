package endpoints

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skiff.dev/services/apiserver/registry/rest"
)

// metrics are the apiserver's Prometheus metrics, named and labelled as kube-apiserver's
// (k8s.io/apiserver/pkg/endpoints/metrics) so existing dashboards read them.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	longRunning *prometheus.GaugeVec
	watchEvents *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	labels := []string{"verb", "group", "version", "resource", "subresource", "scope", "component"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of apiserver requests broken out for each verb, group, version, resource, scope, component, and HTTP response code.",
		}, append(labels, "code")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_request_duration_seconds",
			Help:    "Response latency distribution in seconds for each verb, group, version, resource, subresource, scope and component.",
			Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
		}, labels),
		longRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_longrunning_requests",
			Help: "Gauge of all active long-running apiserver requests (watches) broken out by verb, group, version, resource, scope and component.",
		}, labels),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_events_total",
			Help: "Number of events sent in watch clients",
		}, []string{"group", "version", "resource"}),
	}
	reg.MustRegister(m.requests, m.duration, m.longRunning, m.watchEvents)
	return m
}

// kubeVerb names a request as kube-apiserver's metrics do: LIST and WATCH apart from GET,
// CONNECT for a stream subresource (pods/exec, attach, portforward, log).
func kubeVerb(r *http.Request, req *request) string {
	switch {
	case r.Method == http.MethodGet && req.Name == "" && isWatch(r):
		return "WATCH"
	case r.Method == http.MethodGet && req.Name == "":
		return "LIST"
	}
	if _, ok := req.storage.(rest.Connecter); ok && req.Subresource != "" {
		return "CONNECT"
	}
	return r.Method
}

// isWatch reports whether the query asks for a watch (watch=true or watch=1).
func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v != "" && v != "false" && v != "0"
}

func scopeOf(req *request) string {
	switch {
	case req.Name != "":
		return "resource"
	case req.Namespace != "":
		return "namespace"
	}
	return "cluster"
}

// instrument records one resource request's count, latency and, for watches, the number
// of open watches, around serve.
func (m *metrics) instrument(w http.ResponseWriter, r *http.Request, req *request, serve func(http.ResponseWriter)) {
	verb := kubeVerb(r, req)
	lv := []string{verb, req.gvr.Group, req.gvr.Version, req.gvr.Resource, req.Subresource, scopeOf(req), "apiserver"}
	// Watches and streams (exec, attach, port-forward, log) are long-running,
	// as kube-apiserver counts them: in a gauge, not in the latency histogram.
	longRunning := verb == "WATCH" || verb == "CONNECT"
	if longRunning {
		m.longRunning.WithLabelValues(lv...).Inc()
		defer m.longRunning.WithLabelValues(lv...).Dec()
	}
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	start := time.Now()
	serve(rec)
	if !longRunning {
		m.duration.WithLabelValues(lv...).Observe(time.Since(start).Seconds())
	}
	m.requests.WithLabelValues(append(lv, strconv.Itoa(rec.code))...).Inc()
}
