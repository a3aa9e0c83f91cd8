package endpoints

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// shutdownRetryAfterSeconds is the Retry-After of a request refused during shutdown. kube
// answers 5, after its --shutdown-delay-duration; skiff's apiserver has no such delay and
// is back (or its replacement is) in about a second.
const shutdownRetryAfterSeconds = 1

// retryAfterExemptPaths are served to the end: health probes and metrics scraping, as
// kube's pathPrefixesExemptFromRetryAfter.
var retryAfterExemptPaths = []string{"/readyz", "/livez", "/healthz", "/metrics"}

// WithRetryAfter refuses every request that arrives once shuttingDown is closed with 429
// TooManyRequests, Retry-After: 1 and Connection: close (for HTTP/2, a GOAWAY), as kube's
// filters.WithRetryAfter (k8s.io/apiserver/pkg/server/filters/with_retry_after.go).
//
// The point is the requests a shutdown provokes: ending the open watches makes every
// client re-watch at once, often over a connection the server has not closed yet. Served,
// such a watch would end at once without an event, and client-go's reflector takes a
// watch that ends within its first second without an event for a broken one and relists;
// refused with Retry-After, client-go's request retries after a second on a new
// connection, reaching the restarted apiserver, and resumes from its resourceVersion.
// So shuttingDown must close before the open watches are ended.
func WithRetryAfter(next http.Handler, shuttingDown <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-shuttingDown:
		default:
			next.ServeHTTP(w, r)
			return
		}
		for _, prefix := range retryAfterExemptPaths {
			if strings.HasPrefix(r.URL.Path, prefix) {
				next.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Connection", "close")
		writeError(w, apierrors.NewTooManyRequests("The apiserver is shutting down, please try again later.", shutdownRetryAfterSeconds))
	})
}
