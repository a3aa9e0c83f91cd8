package endpoints

import (
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/server/mux"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	flowcontrolrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/component-base/metrics/legacyregistry"
)

// FlowControl is API Priority and Fairness as NewHandler applies it (Config.FlowControl).
type FlowControl struct {
	// Controller classifies each request by the FlowSchemas and dispatches it through
	// its priority level's queues: k8s.io/apiserver's utilflowcontrol.New, whose config
	// controller watches the FlowSchemas and PriorityLevelConfigurations. Required.
	Controller utilflowcontrol.Interface
	// WorkEstimator is how many seats a request occupies, and for how long
	// (flowcontrolrequest.NewWorkEstimator); nil makes every request one seat.
	WorkEstimator flowcontrolrequest.WorkEstimatorFunc
	// RequestWaitLimit is how long a request may wait in a queue when its context has
	// no deadline: kube-apiserver's --request-timeout / 4 (15 s); 0 means that.
	RequestWaitLimit time.Duration
}

// DefaultRequestWaitLimit is kube-apiserver's default request wait limit in APF's
// queues: its default --request-timeout (60 s) / 4.
const DefaultRequestWaitLimit = 15 * time.Second

// LongRunningRequestCheck is kube-apiserver's: watches and proxy requests, and the
// streaming subresources attach, exec, portforward, log and proxy, hold their
// connection for as long as the client wants (k8s.io/kubernetes/cmd/kube-apiserver's
// BasicLongRunningRequestCheck of those verbs and subresources). APF lets them through
// unqueued, except watches, which it admits and counts until their initial events are
// sent.
var LongRunningRequestCheck = genericfilters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// withRequestInfo puts kube's RequestInfo of the request (its verb, group, version,
// resource, namespace, name and subresource as k8s.io/apiserver's RequestInfoFactory
// reads them from the URL) in its context, where API Priority and Fairness classifies
// by it. A URL the factory cannot read (e.g. /api/v1/watch alone) goes on with what it
// read; the router answers it (404) as before. Mirrors
// k8s.io/apiserver/pkg/endpoints/filters.WithRequestInfo.
func withRequestInfo(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ := requestInfoFactory.NewRequestInfo(r)
		if info == nil {
			info = &genericapirequest.RequestInfo{Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
		}
		next.ServeHTTP(w, r.WithContext(genericapirequest.WithRequestInfo(r.Context(), info)))
	})
}

// filter is API Priority and Fairness as a middleware: k8s.io/apiserver's
// WithPriorityAndFairness, after authentication and impersonation (the user is in the
// context) and withRequestInfo. Each request is classified by the FlowSchemas; one of
// an exempt priority level runs at once, another waits for a seat of its level in the
// queue its flow (the FlowSchema's distinguisher: user or namespace) is shuffle-sharded
// to, and is answered 429 with Retry-After when that queue is full or it has waited
// the request wait limit. Every classified response carries the
// X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID headers.
func (fc *FlowControl) filter(next http.Handler) http.Handler {
	estimator := fc.WorkEstimator
	if estimator == nil {
		estimator = func(*http.Request, string, string) flowcontrolrequest.WorkEstimate {
			return flowcontrolrequest.WorkEstimate{InitialSeats: 1}
		}
	}
	wait := fc.RequestWaitLimit
	if wait <= 0 {
		wait = DefaultRequestWaitLimit
	}
	return genericfilters.WithPriorityAndFairness(next, LongRunningRequestCheck, fc.Controller, estimator, wait)
}

// debugPrefix is where the controller's debug dumps are served.
const debugPrefix = "/debug/api_priority_and_fairness/"

// installDebug serves the controller's debug dumps, kube-apiserver's
// /debug/api_priority_and_fairness/dump_priority_levels, dump_queues and dump_requests
// (CSV-like tables), to whoever may get those non-resource URLs (system:masters).
func (fc *FlowControl) installDebug(r chi.Router) {
	m := mux.NewPathRecorderMux("api-priority-and-fairness")
	fc.Controller.Install(m)
	r.Handle(debugPrefix+"*", m)
}

// flowcontrolMetrics gathers the apiserver_flowcontrol_* families k8s.io/apiserver's
// flowcontrol package keeps in component-base's registry (legacyregistry; registered by
// its metrics.Register), to be served beside the apiserver's own registry.
type flowcontrolMetrics struct{}

func (flowcontrolMetrics) Gather() ([]*dto.MetricFamily, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	kept := families[:0]
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "apiserver_flowcontrol_") {
			kept = append(kept, f)
		}
	}
	return kept, err
}
