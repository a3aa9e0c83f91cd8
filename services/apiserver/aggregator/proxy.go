package aggregator

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
)

// discoveryTimeout bounds a proxied discovery request (/apis/<group>/<version>), which
// every client makes and every extension server must answer fast. Kube's
// aggregatedDiscoveryTimeout.
const discoveryTimeout = 5 * time.Second

// proxyHandler proxies one APIService's group version to its Service. Mirrors
// kube-aggregator's proxyHandler.
type proxyHandler struct {
	a     *Aggregator
	route *route
}

// proxyError answers as kube-aggregator does: a plain-text error.
func proxyError(w http.ResponseWriter, msg string, code int) {
	http.Error(w, msg, code)
}

func (p *proxyHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := p.route
	if !r.available {
		proxyError(w, "service unavailable", http.StatusServiceUnavailable)
		return
	}
	if r.backend.err != nil {
		proxyError(w, r.backend.err.Error(), http.StatusInternalServerError)
		return
	}
	user, ok := genericapirequest.UserFrom(req.Context())
	if !ok {
		proxyError(w, "missing user", http.StatusInternalServerError)
		return
	}
	k := r.backend.key
	addr, err := p.a.cfg.Resolver.Resolve(req.Context(), k.namespace, k.name, k.port)
	if err != nil {
		slog.Error("resolving an aggregated API's service", "apiservice", r.apiService.Name, "service", k.namespace+"/"+k.name, "err", err)
		proxyError(w, "service unavailable", http.StatusServiceUnavailable)
		return
	}
	location := &url.URL{Scheme: "https", Host: addr, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	ctx, cancel := req.Context(), context.CancelFunc(func() {})
	if len(strings.Split(strings.Trim(req.URL.Path, "/"), "/")) == 3 {
		ctx, cancel = context.WithTimeout(ctx, discoveryTimeout)
	}
	defer cancel()
	out := req.WithContext(ctx)
	out.Header = req.Header.Clone()
	out.URL, out.Host = location, location.Host

	upgrade := httpstream.IsUpgradeRequest(req)
	// The caller's identity travels in the request-header fields the extension server
	// trusts from the front-proxy client certificate alone; whatever the client sent in
	// them is dropped. An upgrade is dialled directly (no round tripper), so it carries
	// them on the request.
	var rt http.RoundTripper = transport.NewAuthProxyRoundTripper(user.GetName(), "", user.GetGroups(), user.GetExtra(), r.backend.transport)
	if upgrade {
		transport.SetAuthProxyHeaders(out, user.GetName(), "", user.GetGroups(), user.GetExtra())
	} else {
		rt = p.a.wrap(rt)
	}
	h := proxy.NewUpgradeAwareHandler(location, rt, true, upgrade, responder{name: r.apiService.Name})
	h.ServeHTTP(w, out)
}

// responder answers a failed proxy with 503, as kube-aggregator's.
type responder struct{ name string }

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	slog.Warn("proxying to an aggregated API failed", "apiservice", r.name, "url", req.URL.String(), "err", err)
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// groupHandler serves an aggregated group's APIGroup at /apis/<group>.
func groupHandler(g metav1.APIGroup) http.Handler {
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	body, err := json.Marshal(&g)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
	})
}
