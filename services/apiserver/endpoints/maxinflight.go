package endpoints

import (
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// longRunningSubresources are the streaming subresources that hold a connection for as
// long as the client wants, as kube-apiserver's BasicLongRunningRequestCheck's set.
var longRunningSubresources = map[string]bool{"attach": true, "exec": true, "portforward": true, "log": true, "proxy": true}

// MaxInFlight bounds the requests served at once, as kube-apiserver's
// --max-requests-inflight and --max-mutating-requests-inflight do with
// --enable-priority-and-fairness=false (k8s.io/apiserver/pkg/server/filters/maxinflight.go):
// one semaphore for the read-only verbs (GET, HEAD: get and list) and one for the
// mutating ones (everything else). Long-running requests (watches, pods/exec, attach,
// portforward, log, proxy) and system:masters are not counted. A request finding its
// semaphore full is answered at once with 429 TooManyRequests and Retry-After: 1; it
// never queues. Everyone else shares the limits, first come first served: API Priority
// and Fairness (FlowControl) is what keeps one user's flood from starving the others.
//
// The apiserver's event sink takes its seats too (TakeSeat): an event arriving over NATS
// costs what a POST of it would. Build it with NewMaxInFlight.
type MaxInFlight struct {
	readOnly, mutating chan struct{} // nil: unlimited
	current            *prometheus.GaugeVec
}

// NewMaxInFlight is the limit of readOnly read-only and mutating mutating requests at once
// (0: unlimited), with its apiserver_current_inflight_requests gauge registered with reg.
func NewMaxInFlight(readOnly, mutating int, reg prometheus.Registerer) *MaxInFlight {
	m := &MaxInFlight{current: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_current_inflight_requests",
		Help: "Maximal number of currently used inflight request limit of this apiserver per request kind.",
	}, []string{"request_kind"})}
	reg.MustRegister(m.current)
	if readOnly > 0 {
		m.readOnly = make(chan struct{}, readOnly)
	}
	if mutating > 0 {
		m.mutating = make(chan struct{}, mutating)
	}
	return m
}

// filter is the middleware; it runs after authentication, which put the user in the
// request's context.
func (m *MaxInFlight) filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isLongRunning(r) {
			next.ServeHTTP(w, r)
			return
		}
		u, _ := genericapirequest.UserFrom(r.Context())
		release, ok := m.takeSeat(u, r.Method != http.MethodGet && r.Method != http.MethodHead)
		if !ok {
			tooManyRequests(w)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// TakeSeat takes a seat for one request of u (nil: an unauthenticated one) that info
// describes, as the request filter does for each request that is not long-running:
// system:masters takes none, and a full limit gives ok false (the filter's 429).
// release gives the seat back; call it once the request is done.
func (m *MaxInFlight) TakeSeat(u user.Info, info *genericapirequest.RequestInfo) (release func(), ok bool) {
	return m.takeSeat(u, !readOnlyVerbs.Has(info.Verb))
}

// readOnlyVerbs are the RequestInfo verbs of GET and HEAD requests.
var readOnlyVerbs = sets.New("get", "list", "watch")

func (m *MaxInFlight) takeSeat(u user.Info, mutating bool) (release func(), ok bool) {
	if u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return func() {}, true
	}
	sem, kind := m.readOnly, "readOnly"
	if mutating {
		sem, kind = m.mutating, "mutating"
	}
	g := m.current.WithLabelValues(kind)
	if sem == nil {
		g.Inc()
		return g.Dec, true
	}
	select {
	case sem <- struct{}{}:
	default:
		return nil, false
	}
	g.Inc()
	return func() {
		g.Dec()
		<-sem
	}, true
}

func tooManyRequests(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1))
}

// isLongRunning reports a watch (?watch=true or the legacy /watch/ path) or a streaming
// subresource (.../pods/<name>/exec and the like), from the URL alone.
func isLongRunning(r *http.Request) bool {
	if r.Method == http.MethodGet && isWatch(r) {
		return true
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string // the path after the group version
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return false
	}
	if len(rest) > 0 && rest[0] == "watch" {
		return true
	}
	// <resource>/<name>/<sub> or namespaces/<ns>/<resource>/<name>/<sub>
	n := len(rest)
	return (n == 3 || n == 5 && rest[0] == "namespaces") && longRunningSubresources[rest[n-1]]
}
