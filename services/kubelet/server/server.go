// Package server is the kubelet's HTTPS API on port 10250: exec, attach and
// port-forward streams (through the runtime's CRI Exec / Attach /
// PortForward and the URL it returns), container logs read from the CRI log
// files, and /healthz. Only exec-proxy (CN system:skiff:exec-proxy) and
// members of system:masters may use it; the TLS layer verifies their client
// certificates against the cluster CA. Mirrors kubelet's pkg/kubelet/server
// (server.go, the /exec, /attach, /portForward and /containerLogs routes).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"

	"skiff.dev/services/internal/httpstatus"
	"skiff.dev/services/internal/serving"
)

// Identities allowed to call the kubelet API.
const (
	// ExecProxyUser is exec-proxy's client certificate CommonName.
	ExecProxyUser = "system:skiff:exec-proxy"
	// MastersGroup is the cluster-admin group (client certificate Organization).
	MastersGroup = "system:masters"
)

// HostInterface is what the server needs from the kubelet. Mirrors kubelet's
// server.HostInterface.
type HostInterface interface {
	// GetPodByName returns the pod the kubelet runs as namespace/name.
	GetPodByName(namespace, name string) (*v1.Pod, bool)
	// GetPodStatus returns the status the kubelet last computed for pod uid, which
	// may be newer than the API's; false when it has none.
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
	// Healthz reports the kubelet's health: nil, or why it is unhealthy.
	Healthz() error
}

// Config is what the server needs.
type Config struct {
	// Host is the kubelet; required.
	Host HostInterface
	// Runtime is the CRI runtime service; required.
	Runtime runtimeapi.RuntimeServiceClient
	// Logger receives request errors; nil means slog.Default().
	Logger *slog.Logger
}

// Server is the kubelet API.
type Server struct {
	host    HostInterface
	runtime runtimeapi.RuntimeServiceClient
	logger  *slog.Logger
	mux     *http.ServeMux
}

// New builds the server. Errors: a required field is missing.
func New(cfg Config) (*Server, error) {
	if cfg.Host == nil || cfg.Runtime == nil {
		return nil, errors.New("kubelet server: Host and Runtime are required")
	}
	s := &Server{host: cfg.Host, runtime: cfg.Runtime, logger: cfg.Logger}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.serveHealthz)
	for _, m := range []string{"GET", "POST"} {
		mux.Handle(m+" /exec/{namespace}/{pod}/{container}", s.authorized(s.serveExec))
		mux.Handle(m+" /attach/{namespace}/{pod}/{container}", s.authorized(s.serveAttach))
		mux.Handle(m+" /portForward/{namespace}/{pod}", s.authorized(s.servePortForward))
	}
	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", s.authorized(s.serveContainerLogs))
	s.mux = mux
	return s, nil
}

// ServeHTTP serves the kubelet API; TLS (with client certificates verified
// against the cluster CA) is the caller's listener's job, see Serve.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Serve serves the API on lis over TLS until ctx ends, then closes the server
// and every open stream. tlsConfig holds the kubelet's serving certificate
// (Certificates or GetCertificate) and the cluster CA as ClientCAs; client
// certificates are verified when given (ClientAuth VerifyClientCertIfGiven
// unless set stricter), so /healthz answers without one. Errors: no
// ClientCAs, or serving failed.
func (s *Server) Serve(ctx context.Context, lis net.Listener, tlsConfig *tls.Config) error {
	return serving.ServeTLS(ctx, lis, s, tlsConfig, "kubelet server")
}

// authorized lets through only exec-proxy and system:masters, identified by
// their verified client certificate: 401 without one, 403 for anyone else.
func (s *Server) authorized(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			httpstatus.Write(w, apierrors.NewUnauthorized("a client certificate from the cluster CA is required"))
			return
		}
		subject := r.TLS.VerifiedChains[0][0].Subject
		if subject.CommonName != ExecProxyUser && !slices.Contains(subject.Organization, MastersGroup) {
			httpstatus.Write(w, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "proxy",
				fmt.Errorf("user %q may not use the kubelet API", subject.CommonName)))
			return
		}
		next(w, r)
	})
}

func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	if err := s.host.Healthz(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// podResource is the GroupResource of pod errors.
var podResource = schema.GroupResource{Resource: "pods"}

// pod returns the pod the request names, or a 404.
func (s *Server) pod(r *http.Request) (*v1.Pod, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, ok := s.host.GetPodByName(ns, name)
	if !ok {
		return nil, apierrors.NewNotFound(podResource, name)
	}
	return pod, nil
}

// hasContainer is a 400 unless pod specifies container name.
func hasContainer(pod *v1.Pod, name string) error {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return nil
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return nil
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return nil
		}
	}
	return apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
}

// containers lists the runtime's containers named name of pod, newest
// first; with running only RUNNING ones.
func (s *Server) containers(ctx context.Context, pod *v1.Pod, name string, running bool) ([]*runtimeapi.Container, error) {
	filter := &runtimeapi.ContainerFilter{LabelSelector: map[string]string{kubetypes.KubernetesPodUIDLabel: string(pod.UID), kubetypes.KubernetesContainerNameLabel: name}}
	if running {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	resp, err := s.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("list containers: %w", err))
	}
	cs := resp.GetContainers()
	sort.Slice(cs, func(i, j int) bool { return cs[i].GetCreatedAt() > cs[j].GetCreatedAt() })
	return cs, nil
}

// runningContainerID is the ID of the running container name of the
// request's pod. Errors: 404 no such pod, 400 no such container or it is not
// running.
func (s *Server) runningContainerID(r *http.Request) (*v1.Pod, string, error) {
	pod, err := s.pod(r)
	if err != nil {
		return nil, "", err
	}
	name := r.PathValue("container")
	if err := hasContainer(pod, name); err != nil {
		return nil, "", err
	}
	cs, err := s.containers(r.Context(), pod, name, true)
	if err != nil {
		return nil, "", err
	}
	if len(cs) == 0 {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("container %s in pod %s is not running", name, pod.Name))
	}
	return pod, cs[0].GetId(), nil
}

// streamOptions reads the kube-apiserver → kubelet stream parameters
// (input, output, error, tty as "1"/"true"). Mirrors kubelet's
// server.newStreamingRequest params.
type streamOptions struct{ stdin, stdout, stderr, tty bool }

func readStreamOptions(q url.Values) streamOptions {
	flag := func(k string) bool { b, _ := strconv.ParseBool(q.Get(k)); return b }
	o := streamOptions{stdin: flag("input"), stdout: flag("output"), stderr: flag("error"), tty: flag("tty")}
	if o.tty {
		// A terminal has one output stream; stderr is merged into it.
		o.stderr = false
	}
	return o
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	_, id, err := s.runningContainerID(r)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		httpstatus.Write(w, apierrors.NewBadRequest("you must specify at least one command for the container"))
		return
	}
	o := readStreamOptions(r.URL.Query())
	resp, err := s.runtime.Exec(r.Context(), &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Tty: o.tty, Stdin: o.stdin, Stdout: o.stdout, Stderr: o.stderr,
	})
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("exec: %w", err)))
		return
	}
	s.proxyStream(w, r, resp.GetUrl())
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	_, id, err := s.runningContainerID(r)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	o := readStreamOptions(r.URL.Query())
	resp, err := s.runtime.Attach(r.Context(), &runtimeapi.AttachRequest{
		ContainerId: id, Tty: o.tty, Stdin: o.stdin, Stdout: o.stdout, Stderr: o.stderr,
	})
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("attach: %w", err)))
		return
	}
	s.proxyStream(w, r, resp.GetUrl())
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	pod, err := s.pod(r)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	sbs, err := s.runtime.ListPodSandbox(r.Context(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{kubetypes.KubernetesPodUIDLabel: string(pod.UID)},
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("list pod sandboxes: %w", err)))
		return
	}
	if len(sbs.GetItems()) == 0 {
		httpstatus.Write(w, apierrors.NewBadRequest(fmt.Sprintf("pod %s has no ready sandbox", pod.Name)))
		return
	}
	resp, err := s.runtime.PortForward(r.Context(), &runtimeapi.PortForwardRequest{PodSandboxId: sbs.GetItems()[0].GetId()})
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("port forward: %w", err)))
		return
	}
	s.proxyStream(w, r, resp.GetUrl())
}

// proxyStream proxies the upgraded request to the runtime's stream URL.
// Mirrors kubelet's server.proxyStream.
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("runtime stream URL %q: %w", rawURL, err)))
		return
	}
	handler := proxy.NewUpgradeAwareHandler(u, nil, false, true, &httpstatus.Responder{Logger: s.logger, Message: "stream proxy failed"})
	handler.ServeHTTP(w, r)
}
