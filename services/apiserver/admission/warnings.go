package admission

import (
	"context"
	"net/http"
	"slices"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/warning"
)

// WithWarningHeaders returns ctx carrying a warning recorder (k8s.io/apiserver/pkg/warning)
// that adds each warning a plugin records with warning.AddWarning(ctx, agent, text) to h
// as a `Warning: 299 <agent or -> "<text>"` header, the form client-go's WarningHandler
// reads. A text already among h's Warning headers is not added again, and an empty one
// is dropped. Safe for concurrent use (validating webhooks run in parallel); h must not
// be written by anything else meanwhile. Mirrors filters.WithWarningRecorder.
func WithWarningHeaders(ctx context.Context, h http.Header) context.Context {
	return warning.WithWarningRecorder(ctx, &headerRecorder{header: h})
}

type headerRecorder struct {
	mu     sync.Mutex
	header http.Header
}

// AddWarning implements warning.Recorder.
func (r *headerRecorder) AddWarning(agent, text string) {
	if text == "" {
		return
	}
	value, err := utilnet.NewWarningHeader(299, agent, text)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.header.Values("Warning"), value) {
		return
	}
	r.header.Add("Warning", value)
}
