// Package serving runs the endpoints every skiff service exposes besides its own API:
// /healthz and /livez (the process is up), /readyz (it can do
// its work), Prometheus /metrics and, with WithProfiling, Go's /debug/pprof; and the
// flags every service shares for them and for logging (Options). A control-plane
// component serves them on its secure port (SecureServingOptions): HTTPS, every caller
// authenticated and authorized by the apiserver, as kube's components do; plain HTTP
// (--health-address) is for what only the host reaches.
package serving

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// endpoints is what Handler serves, changed by Options.
type endpoints struct {
	mux         *http.ServeMux
	live, ready []func() error
	delegation  *delegation // WithDelegatedAuth's; read by Options.Start only
}

// Option changes what Handler and Serve expose, or how Options.Start protects it.
type Option func(*endpoints)

// WithProfiling serves Go's profiles under /debug/pprof/ (index, cmdline, profile,
// symbol, trace, and the named profiles heap, goroutine, allocs, block, mutex,
// threadcreate), as kube's components do with --profiling.
func WithProfiling() Option {
	return func(e *endpoints) { RegisterProfiling(e.mux) }
}

// WithLiveness adds check to /healthz and /livez (and so to /readyz): an error there
// means the process is stuck and should be restarted (the kubelet's PLEG, a leader that
// stopped renewing its Lease).
func WithLiveness(check func() error) Option {
	return func(e *endpoints) { e.live = append(e.live, check) }
}

// WithReadiness adds check to /readyz only: an error means the process is up but cannot
// do its work yet.
func WithReadiness(check func() error) Option {
	return func(e *endpoints) { e.ready = append(e.ready, check) }
}

// RegisterProfiling adds Go's /debug/pprof/ handlers to mux.
func RegisterProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Handler serves GET /healthz and /livez (200 "ok" while every WithLiveness check
// passes, else 500 with the first error), /readyz (the liveness and WithReadiness
// checks), /metrics from gatherer when not nil, and what opts add.
func Handler(gatherer prometheus.Gatherer, opts ...Option) http.Handler {
	e := newEndpoints(opts)
	answer := func(checks []func() error, what string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			for _, check := range checks {
				if err := check(); err != nil {
					http.Error(w, what+": "+err.Error(), http.StatusInternalServerError)
					return
				}
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		}
	}
	live := answer(e.live, "not healthy")
	e.mux.Handle("GET /healthz", live)
	e.mux.Handle("GET /livez", live)
	e.mux.Handle("GET /readyz", answer(append(append([]func() error(nil), e.live...), e.ready...), "not ready"))
	if gatherer != nil {
		e.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return e.mux
}

// newEndpoints are the endpoints opts describe.
func newEndpoints(opts []Option) *endpoints {
	e := &endpoints{mux: http.NewServeMux()}
	for _, opt := range opts {
		opt(e)
	}
	return e
}

// Serve answers Handler's endpoints on l until ctx ends, then shuts down within 5 s.
// ready, if not nil, is a WithReadiness check. Returns the listener's error, or nil after
// a clean stop.
func Serve(ctx context.Context, l net.Listener, ready func() error, gatherer prometheus.Gatherer, opts ...Option) error {
	if ready != nil {
		opts = append(opts, WithReadiness(ready))
	}
	srv := &http.Server{Handler: Handler(gatherer, opts...), ReadHeaderTimeout: 10 * time.Second}
	return serve(ctx, srv, func() error { return srv.Serve(l) })
}

// serve runs srv with run (its Serve or ServeTLS) until ctx ends, then shuts it down
// within 5 s. Returns run's error, or nil after a clean stop.
func serve(ctx context.Context, srv *http.Server, run func() error) error {
	errCh := make(chan error, 1)
	go func() { errCh <- run() }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
