package endpoints

import (
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// longRunningSubresources are the streaming subresources that hold a connection for as
// long as the client wants, as kube-apiserver's BasicLongRunningRequestCheck's set.
var longRunningSubresources = map[string]bool{"attach": true, "exec": true, "portforward": true, "log": true, "proxy": true}

// inflightExemptGroups and inflightExemptUsers bypass the max-in-flight limit. kube's
// WithMaxInFlightLimit exempts only system:masters; skiff has no API Priority and Fairness,
// so as its simplification of APF's exempt and system/leader-election priority levels it
// also exempts the nodes (kubelets' Lease renewals and status updates) and the
// control-plane identities (the scheduler, the controller-manager, and skiff's csr-signer,
// which signs the kubelets' certificates), so that a flood from one user cannot starve them.
var (
	inflightExemptGroups = map[string]bool{user.SystemPrivilegedGroup: true, user.NodesGroup: true}
	inflightExemptUsers  = map[string]bool{user.KubeScheduler: true, user.KubeControllerManager: true, "system:skiff:csr-signer": true}
)

// MaxInFlight bounds the requests served at once, as kube-apiserver's
// --max-requests-inflight and --max-mutating-requests-inflight do
// (k8s.io/apiserver/pkg/server/filters/maxinflight.go): one semaphore for the read-only
// verbs (GET, HEAD: get and list) and one for the mutating ones (everything else).
// Long-running requests (watches, pods/exec, attach, portforward, log, proxy) and exempt
// users are not counted. A request finding its semaphore full is answered at once with
// 429 TooManyRequests and Retry-After: 1; it never queues.
//
// As a simplification of APF's fairness between flows, one non-exempt user may hold at
// most a quarter of each limit (userShareDivisor): beyond, that user gets 429 while the
// other users still find seats. (kube's default APF configuration gives all service
// accounts together the workload-low level, about a sixth of the seats.) This bounds
// how much of the CPU one user's flood of LISTs takes from the exempt requests, which
// share the process with it.
//
// The apiserver's event sink takes its seats too (TakeSeat): an event arriving over NATS
// costs what a POST of it would. Build it with NewMaxInFlight.
type MaxInFlight struct {
	readOnly, mutating chan struct{} // nil: unlimited
	current            *prometheus.GaugeVec

	mu        sync.Mutex
	userShare map[string]int // user name + kind → seats held
}

// userShareDivisor: one user may hold at most limit/userShareDivisor seats (at least 1).
const userShareDivisor = 4

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
		release, ok := m.TakeSeat(u, r.Method != http.MethodGet && r.Method != http.MethodHead)
		if !ok {
			tooManyRequests(w)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// TakeSeat takes a seat for one request of u (nil: an unauthenticated one), among the
// mutating requests or the read-only ones, as the request filter does for each request
// that is not long-running: exempt users take none, and a user holding its share, or a
// full limit, gets ok false (the filter's 429). release gives the seat back; call it once
// the request is done.
func (m *MaxInFlight) TakeSeat(u user.Info, mutating bool) (release func(), ok bool) {
	if u != nil && inflightExempt(u) {
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
	name := kind + "/"
	if u != nil {
		name += u.GetName()
	}
	if !m.takeUserSeat(name, max(1, cap(sem)/userShareDivisor)) {
		return nil, false
	}
	select {
	case sem <- struct{}{}:
	default:
		m.releaseUserSeat(name)
		return nil, false
	}
	g.Inc()
	return func() {
		g.Dec()
		<-sem
		m.releaseUserSeat(name)
	}, true
}

func tooManyRequests(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1))
}

// takeUserSeat counts one more request of user (with its kind) unless it holds limit.
func (m *MaxInFlight) takeUserSeat(user string, limit int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.userShare[user] >= limit {
		return false
	}
	if m.userShare == nil {
		m.userShare = map[string]int{}
	}
	m.userShare[user]++
	return true
}

func (m *MaxInFlight) releaseUserSeat(user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.userShare[user]--; m.userShare[user] <= 0 {
		delete(m.userShare, user)
	}
}

func inflightExempt(u user.Info) bool {
	if inflightExemptUsers[u.GetName()] {
		return true
	}
	for _, g := range u.GetGroups() {
		if inflightExemptGroups[g] {
			return true
		}
	}
	return false
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
