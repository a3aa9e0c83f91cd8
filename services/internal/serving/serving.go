// Package serving runs the endpoints every skiff service exposes besides its own API
// (DESIGN.md, "Every service"): /healthz and /livez (the process is up), /readyz (it can do
// its work) and Prometheus /metrics.
package serving

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve answers on l until ctx ends, then shuts down within 5 s. ready, if not nil, decides
// /readyz: nil is 200 "ok", an error is 500 with its text. gatherer, if not nil, is what
// /metrics exposes. Returns the listener's error, or nil after a clean stop.
func Serve(ctx context.Context, l net.Listener, ready func() error, gatherer prometheus.Gatherer) error {
	mux := http.NewServeMux()
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
