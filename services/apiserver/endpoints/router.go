package endpoints

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/common"

	"skiff.dev/services/apiserver/admission"
	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/serviceaccount"
)

// Version is what /version reports. kubectl's dispatcher picks the kubectl binary from
// Major and Minor, so they name the Kubernetes minor whose API skiff follows; GitVersion
// must be semver (kubectl version parses it).
var Version = version.Info{
	Major:        "1",
	Minor:        "32",
	GitVersion:   "v1.32.4+skiff",
	GitTreeState: "clean",
	Compiler:     runtime.Compiler,
	Platform:     runtime.GOOS + "/" + runtime.GOARCH,
	GoVersion:    runtime.Version(),
}

// Config is what NewHandler serves.
type Config struct {
	// Core is the legacy group (/api/v1).
	Core *APIGroupVersion
	// Groups are the named groups (/apis/<group>/<version>), one version each.
	Groups []*APIGroupVersion
	// Admission runs on every write.
	Admission admission.Interface
	// Metrics is where the apiserver's metrics are registered and /metrics reads from;
	// nil means a registry of this handler's own.
	Metrics *prometheus.Registry
	// Authenticator finds each request's user; required (security is on by default).
	Authenticator authentication.Authenticator
	// Authorizer decides on each authenticated request; required.
	Authorizer authorization.Authorizer
	// OpenAPIDefinitions are the schemas of every served kind and what they reference,
	// as openapi-gen generates them (skiff.dev/services/apiserver/openapi); they make
	// /openapi/v3's schemas and server-side apply's type information. Required.
	OpenAPIDefinitions common.GetOpenAPIDefinitions
	// Ready reports whether the apiserver can serve (its storage is reachable); /readyz
	// answers 500 with the error otherwise.
	Ready func() error
	// MaxRequestsInFlight bounds the read-only requests (get, list) served at once and
	// MaxMutatingRequestsInFlight the others, as kube-apiserver's --max-requests-inflight
	// (400) and --max-mutating-requests-inflight (200); beyond, 429 with Retry-After: 1.
	// Watches and streams are not counted; see MaxInFlight for who is exempt. 0 means
	// unlimited.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// InFlight, when set, is the limit requests share with the apiserver's other writers
	// (the event sink), and MaxRequestsInFlight and MaxMutatingRequestsInFlight are not
	// read; nil builds one of them. Not used with FlowControl.
	InFlight *MaxInFlight
	// FlowControl, when set, is API Priority and Fairness, in place of the max-in-flight
	// limits (kube-apiserver's --enable-priority-and-fairness, its default): requests
	// are classified and queued by the FlowSchemas and PriorityLevelConfigurations, and
	// the controller's debug dumps are served under /debug/api_priority_and_fairness/.
	FlowControl *FlowControl
	// Dynamic, when set, serves the groups that come and go while the apiserver runs:
	// custom resources (package apiextensions).
	Dynamic DynamicAPI
	// Aggregated, when set, serves the groups extension API servers serve behind
	// APIServices (package aggregator), ahead of Dynamic.
	Aggregated AggregatedAPI
	// ServiceAccountDiscovery, when set, is served at /.well-known/openid-configuration
	// and /openid/v1/jwks (kube's service-account issuer discovery), to whoever may get
	// those non-resource URLs (RBAC's system:service-account-issuer-discovery).
	ServiceAccountDiscovery *serviceaccount.DiscoveryDocuments
}

// NewHandler returns the apiserver's HTTP handler: /version, /healthz, /livez, /readyz,
// service-account issuer discovery,
// legacy discovery (/api, /apis, /api/v1, /apis/<group>, /apis/<group>/<version>) and
// every resource URL under them.
func NewHandler(cfg Config) http.Handler {
	if cfg.Admission == nil {
		cfg.Admission = admission.Chain{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	m := newMetrics(cfg.Metrics)
	r := chi.NewRouter()
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		panic("endpoints: Config.Authenticator and Config.Authorizer are required")
	}
	if cfg.OpenAPIDefinitions == nil {
		panic("endpoints: Config.OpenAPIDefinitions is required")
	}
	// kube's chain: authentication, impersonation, then API Priority and Fairness (or
	// max-in-flight), then authorization.
	var limit func(http.Handler) http.Handler
	if cfg.FlowControl != nil {
		limit = func(next http.Handler) http.Handler { return withRequestInfo(cfg.FlowControl.filter(next)) }
	} else {
		inflight := cfg.InFlight
		if inflight == nil {
			inflight = NewMaxInFlight(cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight, cfg.Metrics)
		}
		limit = inflight.filter
	}
	r.Use(recoverPanics, logRequests, withAuthentication(cfg.Authenticator), withImpersonation(cfg.Authorizer), limit, withNonResourceAuthorization(cfg.Authorizer))
	if cfg.FlowControl != nil {
		cfg.FlowControl.installDebug(r)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeError(w, notFoundPath(r.URL.Path)) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apierrors.NewMethodNotSupported(metav1.SchemeGroupVersion.WithResource("").GroupResource(), r.Method))
	})

	r.Get("/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, "application/json", Version)
	})
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}
	if d := cfg.ServiceAccountDiscovery; d != nil {
		r.Get(serviceaccount.OpenIDConfigurationPath, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(d.OpenIDConfiguration)
		})
		r.Get(serviceaccount.JWKSPath, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(d.JWKS)
		})
	}
	var gatherer prometheus.Gatherer = cfg.Metrics
	if cfg.FlowControl != nil {
		gatherer = prometheus.Gatherers{cfg.Metrics, flowcontrolMetrics{}}
	}
	r.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	r.Get("/healthz", ok)
	r.Get("/livez", ok)
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				http.Error(w, "[-]etcd failed: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		ok(w, req)
	})

	openapi := newOpenAPI(append([]*APIGroupVersion{cfg.Core}, cfg.Groups...), cfg.OpenAPIDefinitions)
	openapi.dynamic, openapi.aggregated = cfg.Dynamic, cfg.Aggregated
	fields := &fieldManagers{openAPI: openapi}
	r.Get("/openapi/v3", openapi.serveIndex)
	r.Get("/openapi/v3/*", openapi.serveDocument)
	openapi.registerV2(r)

	// Discovery answers its paths with or without a trailing slash, as kube-apiserver
	// does (clients and the conformance suite ask for /apis/).
	d := newDiscovery(cfg.Core, cfg.Groups, cfg.Dynamic)
	d.aggregated = cfg.Aggregated
	discovery := func(path string, h http.HandlerFunc) {
		r.Get(path, h)
		r.Get(path+"/", h)
	}
	discovery("/api", d.serveAPIVersions)
	discovery("/apis", d.serveAPIGroupList)

	cfg.Core.index()
	core := &resourceHandler{gv: cfg.Core, admit: cfg.Admission, authz: cfg.Authorizer, metrics: m, fields: fields}
	discovery("/api/v1", d.serveResourceList(cfg.Core))
	r.Handle("/api/v1/*", core)
	for _, versions := range groupsOf(cfg.Groups) {
		prefix := "/apis/" + versions[0].GroupVersion.Group
		discovery(prefix, d.serveAPIGroup(versions))
		for _, gv := range versions {
			gv.index()
			discovery(prefix+"/"+gv.GroupVersion.Version, d.serveResourceList(gv))
			r.Handle(prefix+"/"+gv.GroupVersion.Version+"/*", &resourceHandler{gv: gv, admit: cfg.Admission, authz: cfg.Authorizer, metrics: m, fields: fields})
		}
	}
	var apis http.Handler
	if cfg.Dynamic != nil {
		apis = &dynamicHandler{api: cfg.Dynamic, discovery: d, newGV: func(gv *APIGroupVersion) *resourceHandler {
			return &resourceHandler{gv: gv, admit: cfg.Admission, authz: cfg.Authorizer, metrics: m, fields: fields}
		}}
	}
	if cfg.Aggregated != nil {
		next := apis
		if next == nil {
			next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeError(w, notFoundPath(r.URL.Path)) })
		}
		apis = &aggregatedHandler{api: cfg.Aggregated, authz: cfg.Authorizer, next: next}
	}
	if apis != nil {
		r.Handle("/apis/*", apis)
	}
	return r
}

// recoverPanics turns a panic in a handler into a 500 Status instead of a dropped
// connection, and logs the stack: a panic is a skiff bug.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				slog.Error("panic serving request", "method", r.Method, "url", r.URL.String(), "panic", v, "stack", string(debug.Stack()))
				writeError(w, apierrors.NewInternalError(fmt.Errorf("panic: %v", v)))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// statusRecorder remembers the response code for the request log.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Flush lets watch streams through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logRequests logs each request at debug level, as kube-apiserver's httplog does at -v=3.
func logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		slog.Debug("request", "verb", r.Method, "uri", r.URL.RequestURI(), "code", rec.code,
			"latency", time.Since(start), "userAgent", r.UserAgent())
	})
}
