package pod

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/proxy"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry/rest"
)

// Front-proxy headers that carry the caller's identity to exec-proxy
// (kube-apiserver's --requestheader-username-headers and -group-headers).
const (
	RemoteUserHeader  = "X-Remote-User"
	RemoteGroupHeader = "X-Remote-Group"
)

// ExecProxy is where the streaming pod subresources go: exec-proxy's base URL
// (https://host:10443) and the TLS config the apiserver dials it with (its
// front-proxy-client certificate, of the front-proxy CA, and the cluster CA that
// verifies exec-proxy).
type ExecProxy struct {
	URL *url.URL
	TLS *tls.Config
}

// transport returns the transport to exec-proxy.
func (e *ExecProxy) transport() *http.Transport {
	return &http.Transport{
		TLSClientConfig:     e.TLS,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
	}
}

// ProxyREST serves one streaming pod subresource — exec, attach, portforward
// (GET and POST) or log (GET) — by proxying the request, upgrade included,
// to exec-proxy with the caller in the front-proxy headers. Mirrors
// kube-apiserver's ExecREST, AttachREST, PortForwardREST and LogREST
// (pkg/registry/core/pod/rest), which proxy to the kubelet directly.
type ProxyREST struct {
	subresource string
	methods     []string
	newObj      func() runtime.Object
	proxy       *ExecProxy
	transport   *http.Transport
}

// NewSubresources returns the REST of pods/exec, pods/attach,
// pods/portforward and pods/log, by subresource name, proxying to ep (nil:
// every request answers 503 until exec-proxy is configured).
func NewSubresources(ep *ExecProxy) map[string]*ProxyREST {
	var transport *http.Transport
	if ep != nil && ep.URL != nil {
		transport = ep.transport()
	}
	mk := func(sub string, newObj func() runtime.Object, methods ...string) *ProxyREST {
		return &ProxyREST{subresource: sub, methods: methods, newObj: newObj, proxy: ep, transport: transport}
	}
	return map[string]*ProxyREST{
		"exec":        mk("exec", func() runtime.Object { return &corev1.PodExecOptions{} }, http.MethodGet, http.MethodPost),
		"attach":      mk("attach", func() runtime.Object { return &corev1.PodAttachOptions{} }, http.MethodGet, http.MethodPost),
		"portforward": mk("portforward", func() runtime.Object { return &corev1.PodPortForwardOptions{} }, http.MethodGet, http.MethodPost),
		"log":         mk("log", func() runtime.Object { return &corev1.Pod{} }, http.MethodGet),
	}
}

// New returns the subresource's options object (PodExecOptions, ...).
func (r *ProxyREST) New() runtime.Object { return r.newObj() }

// ConnectMethods are the methods kubectl uses: GET (WebSocket) and POST
// (SPDY) for the streams, GET for log.
func (r *ProxyREST) ConnectMethods() []string { return r.methods }

// Connect returns the proxy to exec-proxy for pod namespace/name. Errors: 503
// when exec-proxy is not configured, 401 when the context has no user.
func (r *ProxyREST) Connect(ctx context.Context, namespace, name string) (http.Handler, error) {
	if r.proxy == nil || r.proxy.URL == nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("pods/%s is not available: exec-proxy is not configured", r.subresource))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u.GetName() == "" {
		return nil, apierrors.NewUnauthorized("no user")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		loc := *r.proxy.URL
		loc.Path = fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/%s", namespace, name, r.subresource)
		loc.RawQuery = req.URL.RawQuery
		h := proxy.NewUpgradeAwareHandler(&loc, r.transport, false, false, responder{})
		// `kubectl logs -f` sees every line as soon as it is written.
		h.FlushInterval = -1
		req = req.Clone(req.Context())
		// Only the apiserver speaks for the caller: identity headers the
		// client sent are dropped, then set from the authenticated user.
		req.Header.Del(RemoteUserHeader)
		req.Header.Del(RemoteGroupHeader)
		req.Header.Del("Authorization")
		req.Header.Set(RemoteUserHeader, u.GetName())
		for _, g := range u.GetGroups() {
			req.Header.Add(RemoteGroupHeader, g)
		}
		h.ServeHTTP(w, req)
	}), nil
}

// responder answers a failed proxy to exec-proxy with 503.
type responder struct{}

func (responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	slog.Error("proxy to exec-proxy failed", "url", req.URL.String(), "err", err)
	rest.WriteServiceUnavailable(w, fmt.Sprintf("exec-proxy is unavailable: %v", err))
}
