// Package serving runs the endpoints every skiff service exposes besides its own API
// (DESIGN.md, "Every service"): /healthz and /livez (the process is up), /readyz (it can do
// its work), Prometheus /metrics and, with WithProfiling, Go's /debug/pprof.
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

// Option changes what Serve exposes.
type Option func(*http.ServeMux)

// WithProfiling serves Go's profiles under /debug/pprof/ (index, cmdline, profile,
// symbol, trace, and the named profiles heap, goroutine, allocs, block, mutex,
// threadcreate), as kube's components do with --profiling.
func WithProfiling() Option {
	return func(mux *http.ServeMux) { RegisterProfiling(mux) }
}

// RegisterProfiling adds Go's /debug/pprof/ handlers to mux.
func RegisterProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Serve answers on l until ctx ends, then shuts down within 5 s. ready, if not nil, decides
// /readyz: nil is 200 "ok", an error is 500 with its text. gatherer, if not nil, is what
// /metrics exposes. Returns the listener's error, or nil after a clean stop.
func Serve(ctx context.Context, l net.Listener, ready func() error, gatherer prometheus.Gatherer, opts ...Option) error {
	mux := http.NewServeMux()
	for _, opt := range opts {
		opt(mux)
	}
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		ok(w, r)
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(l) }()
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
