// Package execproxy is skiff's exec-proxy: the upgrade-aware proxy that
// carries kubectl exec, attach, port-forward and logs from the apiserver to
// the kubelet on the pod's node, so long-lived streams scale apart from API
// requests. The apiserver authenticates and authorizes the caller and
// forwards the request — upgrade included — with the caller in the
// front-proxy headers X-Remote-User and X-Remote-Group, over a connection
// made with its front-proxy-client certificate, which the front-proxy CA issues
// (kube-apiserver's --proxy-client-cert-file). exec-proxy verifies client
// certificates against that CA alone and trusts the headers only from the names
// it allows (--requestheader-client-ca-file, --requestheader-allowed-names),
// so no certificate of the cluster CA, a node's included, gets in. It finds the pod's node and its kubelet
// endpoint (Node status.addresses and
// status.daemonEndpoints.kubeletEndpoint.port), and dials the kubelet over
// HTTPS with its own client certificate (system:skiff:exec-proxy), verifying
// the kubelet's serving certificate against the cluster CA. A node that holds
// a tunnel (package tunnel: the kubelet dialed out to exec-proxy's tunnel port,
// as konnectivity's agents do) is reached through it instead, whatever its
// address: the same TLS connection to the kubelet API, carried over the tunnel.
//
// kubectl 1.32 speaks WebSocket v5.channel.k8s.io for exec and attach, which
// the runtimes' streaming servers do not: exec-proxy translates it to SPDY
// towards the kubelet with k8s.io/apiserver's StreamTranslatorHandler, and
// port-forward's SPDY-over-WebSocket tunnel with its TunnelingHandler, as
// kube-apiserver does (pkg/registry/core/pod/rest/subresources.go). SPDY
// requests are proxied as they are with the UpgradeAwareHandler.
package execproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	upgradeproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/internal/httpstatus"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
)

// Front-proxy contract (kube-apiserver's --requestheader-* flags).
const (
	// FrontProxyUser is the CommonName of the apiserver's client certificate,
	// the only one whose identity headers are trusted.
	FrontProxyUser = "front-proxy-client"
	// RemoteUserHeader names the authenticated caller.
	RemoteUserHeader = "X-Remote-User"
	// RemoteGroupHeader names each of the caller's groups (repeated).
	RemoteGroupHeader = "X-Remote-Group"
)

// ExecProxyUser is exec-proxy's own identity (client certificate CN) toward the
// apiserver and the kubelets.
const ExecProxyUser = "system:skiff:exec-proxy"

// DefaultPort is exec-proxy's port.
const DefaultPort = 10443

// dialTimeout bounds reaching the kubelet before a 502.
const dialTimeout = 5 * time.Second

// Config is what exec-proxy needs.
type Config struct {
	// Client reads pods and nodes (as system:skiff:exec-proxy); required.
	Client kubernetes.Interface
	// KubeletTLS dials kubelets: RootCAs is the cluster CA, Certificates
	// holds exec-proxy's client certificate; required.
	KubeletTLS *tls.Config
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider traces every request (a server span continuing the
	// apiserver's traceparent); nil means the global provider.
	TracerProvider trace.TracerProvider
	// Tunnels reaches the kubelets of nodes that hold a tunnel (a
	// *tunnel.Server); nil means every kubelet is dialed directly.
	Tunnels TunnelDialer
	// AllowedNames are the client certificate CNs whose identity headers are
	// trusted (kube's --requestheader-allowed-names); nil means
	// []string{FrontProxyUser}. The certificate itself must verify against the
	// serving TLS's ClientCAs, the front-proxy CA.
	AllowedNames []string
}

// TunnelDialer opens connections to a node's kubelet API through the node's
// tunnel. *tunnel.Server is one.
type TunnelDialer interface {
	// Has reports whether node holds a tunnel.
	Has(node string) bool
	// Dial opens a connection to node's kubelet API through its tunnel.
	Dial(ctx context.Context, node string) (net.Conn, error)
}

// Proxy serves the pod subresources exec, attach, portforward and log under
// the apiserver's URLs: /api/v1/namespaces/{ns}/pods/{name}/{subresource}.
type Proxy struct {
	client     kubernetes.Interface
	kubeletTLS *tls.Config
	transport  *http.Transport
	logger     *slog.Logger
	tracer     trace.TracerProvider
	tunnels    TunnelDialer
	allowed    []string
	mux        *http.ServeMux
}

// New builds the proxy. Errors: a required field is missing.
func New(cfg Config) (*Proxy, error) {
	if cfg.Client == nil || cfg.KubeletTLS == nil {
		return nil, errors.New("exec-proxy: Client and KubeletTLS are required")
	}
	p := &Proxy{client: cfg.Client, kubeletTLS: cfg.KubeletTLS.Clone(), logger: cfg.Logger, tracer: cfg.TracerProvider, tunnels: cfg.Tunnels,
		allowed: cfg.AllowedNames}
	if len(p.allowed) == 0 {
		p.allowed = []string{FrontProxyUser}
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	p.transport = &http.Transport{
		TLSClientConfig:     p.kubeletTLS,
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSHandshakeTimeout: dialTimeout,
		Proxy:               nil,
	}
	mux := http.NewServeMux()
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /api/v1/namespaces/{namespace}/pods/{name}/exec", p.serveExec)
		mux.HandleFunc(m+" /api/v1/namespaces/{namespace}/pods/{name}/attach", p.serveAttach)
		mux.HandleFunc(m+" /api/v1/namespaces/{namespace}/pods/{name}/portforward", p.servePortForward)
	}
	mux.HandleFunc("GET /api/v1/namespaces/{namespace}/pods/{name}/log", p.serveLog)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	p.mux = mux
	return p, nil
}

// ServeHTTP serves the proxy. Every request but /healthz must come from the
// apiserver (a client certificate verified against the front-proxy CA, whose
// CN is one of AllowedNames: 401 without a certificate, 403 for another name)
// and name its caller in X-Remote-User (401 without).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		p.mux.ServeHTTP(w, r)
		return
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		httpstatus.Write(w, apierrors.NewUnauthorized("a client certificate from the front-proxy CA is required"))
		return
	}
	if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; !slices.Contains(p.allowed, cn) {
		httpstatus.Write(w, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
			fmt.Errorf("user %q may not call exec-proxy: only the apiserver (%s) may", cn, strings.Join(p.allowed, ", "))))
		return
	}
	if r.Header.Get(RemoteUserHeader) == "" {
		httpstatus.Write(w, apierrors.NewUnauthorized("no "+RemoteUserHeader+" header"))
		return
	}
	p.logger.Debug("stream request", "user", r.Header.Get(RemoteUserHeader), "groups", r.Header.Values(RemoteGroupHeader),
		"method", r.Method, "path", r.URL.Path)
	p.mux.ServeHTTP(w, r)
}

// Serve serves the proxy on lis over TLS until ctx ends, then closes it and
// every open stream. tlsConfig holds exec-proxy's serving certificate and the
// front-proxy CA as ClientCAs (client certificates are verified when given, so
// /healthz answers without one). Errors: no ClientCAs, or serving failed.
func (p *Proxy) Serve(ctx context.Context, lis net.Listener, tlsConfig *tls.Config) error {
	defer p.transport.CloseIdleConnections()
	return serving.ServeTLS(ctx, lis, tracing.Handler(p, p.tracer, "exec-proxy"), tlsConfig, "exec-proxy")
}

var podResource = schema.GroupResource{Resource: "pods"}

// target is where on which kubelet a request goes.
type target struct {
	pod       *v1.Pod
	container string
	kubelet   *url.URL // https://host:port, no path
	// transport reaches the kubelet: exec-proxy's shared one, or one over the
	// node's tunnel.
	transport *http.Transport
}

// resolve finds the pod, the container (the query's, or the only one) and
// the pod's kubelet. Errors: 404 pod not found, 400 container not found or
// missing, 400 pod not running (running required), 502 node without a
// reachable kubelet address.
func (p *Proxy) resolve(r *http.Request, needContainer, needRunning bool) (*target, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	pod, err := p.client.CoreV1().Pods(ns).Get(r.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	t := &target{pod: pod}
	if needContainer {
		if t.container, err = containerOf(pod, r.URL.Query().Get("container")); err != nil {
			return nil, err
		}
	}
	if pod.Spec.NodeName == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", name))
	}
	if needRunning && pod.Status.Phase != v1.PodRunning {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s is not running: its phase is %s", name, pod.Status.Phase))
	}
	node, err := p.client.CoreV1().Nodes().Get(r.Context(), pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, badGateway(fmt.Sprintf("node %s of pod %s: %v", pod.Spec.NodeName, name, err))
	}
	host := nodeAddress(node)
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if host == "" || port <= 0 {
		return nil, badGateway(fmt.Sprintf("node %s reports no kubelet address", node.Name))
	}
	t.kubelet = &url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(int(port)))}
	tlsCfg := p.kubeletTLS.Clone()
	tlsCfg.ServerName = host
	dial := (&net.Dialer{Timeout: dialTimeout}).DialContext
	t.transport = p.transport
	via := "directly"
	if p.tunnels != nil && p.tunnels.Has(node.Name) {
		t.transport = p.tunnelTransport(node.Name, tlsCfg)
		dial = t.transport.DialContext
		via = "through its tunnel"
	}
	// A kubelet that cannot be reached, or whose serving certificate does not
	// verify, is a 502 before the upgrade, not a stream that fails after it.
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: tlsCfg}
	var conn net.Conn
	if t.transport == p.transport {
		conn, err = d.DialContext(r.Context(), "tcp", t.kubelet.Host)
	} else {
		conn, err = dialTLS(r.Context(), dial, t.kubelet.Host, tlsCfg)
	}
	if err != nil {
		return nil, badGateway(fmt.Sprintf("node %s is unreachable %s: %v", node.Name, via, err))
	}
	conn.Close()
	return t, nil
}

// tunnelTransport reaches node's kubelet over its tunnel: each connection is a
// new tunnelled one (no keep-alive, so nothing stays open once a request is
// done), and TLS verifies the kubelet's serving certificate for the node's
// address (tlsCfg.ServerName) as a direct dial would.
func (p *Proxy) tunnelTransport(node string, tlsCfg *tls.Config) *http.Transport {
	return &http.Transport{
		TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.tunnels.Dial(ctx, node)
		},
		TLSHandshakeTimeout: dialTimeout,
		DisableKeepAlives:   true,
		Proxy:               nil,
	}
}

// dialTLS opens a connection with dial and completes a TLS handshake over it
// within dialTimeout.
func dialTLS(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// nodeAddress picks the node's InternalIP, else ExternalIP, else Hostname:
// the order kubeadm gives kube-apiserver's --kubelet-preferred-address-types,
// since a node's host name need not resolve where exec-proxy runs.
func nodeAddress(node *v1.Node) string {
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP, v1.NodeHostName} {
		for _, a := range node.Status.Addresses {
			if a.Type == typ && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

// containerOf returns name if pod has that container, or pod's only
// container when name is empty. Errors are 400s worded as kube-apiserver's.
func containerOf(pod *v1.Pod, name string) (string, error) {
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	var all []string
	all = append(all, names...)
	for _, c := range pod.Spec.InitContainers {
		all = append(all, c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		all = append(all, c.Name)
	}
	if name == "" {
		if len(names) == 1 {
			return names[0], nil
		}
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
	}
	if !slices.Contains(all, name) {
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	}
	return name, nil
}

func badGateway(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonServiceUnavailable, Message: msg,
	}}
}

// streamOpts reads kubectl's stdin/stdout/stderr/tty query flags.
func streamOpts(q url.Values) proxy.Options {
	flag := func(k string) bool { b, _ := strconv.ParseBool(q.Get(k)); return b }
	o := proxy.Options{Stdin: flag("stdin"), Stdout: flag("stdout"), Stderr: flag("stderr"), Tty: flag("tty")}
	if o.Tty {
		o.Stderr = false
	}
	return o
}

// kubeletStreamQuery is the kubelet's spelling of the stream flags
// (input, output, error, tty), plus the commands for exec. Mirrors
// kube-apiserver's pod streamParams.
func kubeletStreamQuery(o proxy.Options, commands []string) url.Values {
	q := url.Values{}
	set := func(k string, on bool) {
		if on {
			q.Set(k, "1")
		}
	}
	set("input", o.Stdin)
	set("output", o.Stdout)
	set("error", o.Stderr)
	set("tty", o.Tty)
	for _, c := range commands {
		q.Add("command", c)
	}
	return q
}

func (p *Proxy) serveExec(w http.ResponseWriter, r *http.Request) {
	commands := r.URL.Query()["command"]
	if len(commands) == 0 {
		httpstatus.Write(w, apierrors.NewBadRequest("you must specify at least one command for the container"))
		return
	}
	p.serveStream(w, r, "exec", commands)
}

func (p *Proxy) serveAttach(w http.ResponseWriter, r *http.Request) {
	p.serveStream(w, r, "attach", nil)
}

// serveStream proxies exec or attach: WebSocket v5 is translated to SPDY
// towards the kubelet, SPDY goes through as it is.
func (p *Proxy) serveStream(w http.ResponseWriter, r *http.Request, kind string, commands []string) {
	t, err := p.resolve(r, true, true)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	o := streamOpts(r.URL.Query())
	if !o.Stdin && !o.Stdout && !o.Stderr {
		httpstatus.Write(w, apierrors.NewBadRequest("you must specify at least one of stdin, stdout, stderr"))
		return
	}
	loc := *t.kubelet
	loc.Path = fmt.Sprintf("/%s/%s/%s/%s", kind, t.pod.Namespace, t.pod.Name, t.container)
	loc.RawQuery = kubeletStreamQuery(o, commands).Encode()
	upgrade := p.upgradeHandler(&loc, t.transport, true)
	translator := proxy.NewStreamTranslatorHandler(&loc, t.transport, 0, o)
	proxy.NewTranslatingHandler(upgrade, translator, wsstream.IsWebSocketRequestWithStreamCloseProtocol).ServeHTTP(w, withKubeletQuery(r, loc.RawQuery))
}

func (p *Proxy) servePortForward(w http.ResponseWriter, r *http.Request) {
	t, err := p.resolve(r, false, true)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	loc := *t.kubelet
	loc.Path = fmt.Sprintf("/portForward/%s/%s", t.pod.Namespace, t.pod.Name)
	loc.RawQuery = r.URL.RawQuery
	upgrade := p.upgradeHandler(&loc, t.transport, true)
	tunneling := proxy.NewTunnelingHandler(upgrade)
	proxy.NewTranslatingHandler(upgrade, tunneling, wsstream.IsWebSocketRequestWithTunnelingProtocol).ServeHTTP(w, r)
}

// serveLog proxies the container's log, streamed (flushed as it arrives) for
// follow. Mirrors kube-apiserver's LogLocation and its query parameters.
func (p *Proxy) serveLog(w http.ResponseWriter, r *http.Request) {
	t, err := p.resolve(r, true, false)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	in := r.URL.Query()
	q := url.Values{}
	for _, k := range []string{"follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime", "limitBytes"} {
		if v := in.Get(k); v != "" {
			q.Set(k, v)
		}
	}
	loc := *t.kubelet
	loc.Path = fmt.Sprintf("/containerLogs/%s/%s/%s", t.pod.Namespace, t.pod.Name, t.container)
	loc.RawQuery = q.Encode()
	if wsstream.IsWebSocketRequest(r) {
		p.serveLogOverWebSocket(w, r, t.transport, &loc)
		return
	}
	h := p.upgradeHandler(&loc, t.transport, false)
	h.ServeHTTP(w, withKubeletQuery(r, loc.RawQuery))
}

// serveLogOverWebSocket reads the log at loc from the kubelet with a plain GET and
// sends it over the WebSocket the client asked for, as kube-apiserver serves a
// streamed subresource to a WebSocket client (wsstream.Reader: subprotocol
// binary.k8s.io, base64.binary.k8s.io or none; the socket closes when the log ends). A
// kubelet error is passed on as it came, before any upgrade.
func (p *Proxy) serveLogOverWebSocket(w http.ResponseWriter, r *http.Request, transport *http.Transport, loc *url.URL) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, loc.String(), nil)
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(err))
		return
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		httpstatus.Write(w, badGateway(fmt.Sprintf("error reading logs from the kubelet: %v", err)))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	if err := wsstream.NewReader(resp.Body, true, wsstream.NewDefaultReaderProtocols()).Copy(w, r); err != nil {
		p.logger.Debug("log over WebSocket", "url", loc.String(), "err", err)
	}
}

// upgradeHandler proxies to loc over transport (the target's). Mirrors
// kube-apiserver's newThrottledUpgradeAwareProxyHandler.
func (p *Proxy) upgradeHandler(loc *url.URL, transport *http.Transport, upgradeRequired bool) *upgradeproxy.UpgradeAwareHandler {
	h := upgradeproxy.NewUpgradeAwareHandler(loc, transport, false, upgradeRequired, &httpstatus.Responder{Logger: p.logger, Message: "proxy to kubelet failed", Wrap: func(err error) error {
		return badGateway(fmt.Sprintf("error proxying to the kubelet: %v", err))
	}})
	h.UseRequestLocation = false
	// Logs flush every write, so `kubectl logs -f` sees each line at once.
	h.FlushInterval = -1
	return h
}

// withKubeletQuery is r with the query the kubelet expects: the
// UpgradeAwareHandler copies the request's query onto the location.
func withKubeletQuery(r *http.Request, rawQuery string) *http.Request {
	r2 := r.Clone(r.Context())
	u := *r.URL
	u.RawQuery = rawQuery
	r2.URL = &u
	// The kubelet trusts exec-proxy's certificate, not these headers.
	r2.Header.Del(RemoteUserHeader)
	r2.Header.Del(RemoteGroupHeader)
	return r2
}

// KubeletClientTLS is the TLS config exec-proxy dials kubelets with: its
// client certificate, and the cluster CA to verify the kubelets' serving
// certificates.
func KubeletClientTLS(cert tls.Certificate, clusterCA *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: clusterCA, MinVersion: tls.VersionTLS12}
}
