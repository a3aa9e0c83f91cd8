package rest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
)

// ProxyMethods are the HTTP methods the pods/proxy and services/proxy subresources
// pass on, as kube-apiserver's proxy subresources do.
var ProxyMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// proxyTransport reaches pods directly (the apiserver must route to the pod network,
// as kube-apiserver without an egress selector): plain HTTP, or HTTPS without
// verifying the pod's certificate, as kube-apiserver's proxy transport does.
var proxyTransport = &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kube's proxy transport to pods
	TLSHandshakeTimeout: 10 * time.Second,
	MaxIdleConnsPerHost: 25,
	IdleConnTimeout:     90 * time.Second,
}

// ProxyTo is the handler of a .../<name>/proxy[/<path>] request: it sends the request
// on to location with <path> and the query appended, upgrades (WebSocket, SPDY)
// included, rewriting links in HTML answers as kube-apiserver does. The caller's
// credentials (Authorization, impersonation and front-proxy identity headers) never
// reach the pod. A backend that cannot be reached is a 503 Status. Mirrors the Connect
// of kube's pod and service ProxyREST.
func ProxyTo(location *url.URL, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		loc := *location
		loc.Path = utilnet.JoinPreservingTrailingSlash(loc.Path, proxySubpath(req.URL.Path, name))
		loc.RawQuery = req.URL.RawQuery
		h := proxy.NewUpgradeAwareHandler(&loc, proxyTransport, true, false, proxyResponder{})
		req = req.Clone(req.Context())
		for k := range req.Header {
			if k == "Authorization" || strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Remote-") {
				req.Header.Del(k)
			}
		}
		h.ServeHTTP(w, req)
	})
}

// proxySubpath is what follows "/<name>/proxy" in path ("" when nothing does).
func proxySubpath(path, name string) string {
	marker := "/" + name + "/proxy"
	i := strings.Index(path, marker)
	if i < 0 {
		return ""
	}
	return path[i+len(marker):]
}

// proxyResponder answers a request the backend did not take with 503.
type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, req *http.Request, err error) {
	slog.Debug("proxy to a pod failed", "url", req.URL.String(), "err", err)
	WriteServiceUnavailable(w, fmt.Sprintf("error trying to reach service: %v", err))
}

// WriteServiceUnavailable answers a proxied request its backend did not take: a 503
// Status with message, as kube-apiserver's proxy responders write it.
func WriteServiceUnavailable(w http.ResponseWriter, message string) {
	st := apierrors.NewServiceUnavailable(message).ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}
