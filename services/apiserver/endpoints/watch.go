package endpoints

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"skiff.dev/services/apiserver/registry/rest"
)

// minRequestTimeout is kube-apiserver's --min-request-timeout: a watch without
// timeoutSeconds lasts between one and two of these, so clients spread their re-watches.
const minRequestTimeout = 30 * time.Minute

// serveWatch streams watch events as chunked JSON, one metav1.WatchEvent per line,
// flushed per event: {"type":"ADDED","object":{...}}. With kubectl's Table Accept header
// every object is a one-row Table, with column definitions only in the first. Bookmarks
// are sent only when allowWatchBookmarks was asked for. The stream ends at timeoutSeconds,
// when the client goes away, or after an ERROR event (e.g. 410 Expired). Mirrors
// k8s.io/apiserver/pkg/endpoints/handlers/watch.go.
func (h *resourceHandler) serveWatch(w http.ResponseWriter, r *http.Request, req *request, watcher rest.Watcher, opts *metainternalversion.ListOptions) {
	timeout := minRequestTimeout + time.Duration(rand.Int64N(int64(minRequestTimeout)))
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	var convertor rest.TableConvertor
	if wantsTable(r) {
		convertor, _ = req.storage.(rest.TableConvertor)
	}
	var tableOpts *metav1.TableOptions
	if convertor != nil {
		var err error
		if tableOpts, err = tableOptions(r); err != nil {
			writeError(w, err)
			return
		}
	}

	wi, err := watcher.Watch(ctx, req.Namespace, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	defer wi.Stop()

	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, apierrors.NewInternalError(errNoFlusher))
		return
	}
	// Clients that prefer protobuf (client-go's typed clients: the kubelets, the
	// scheduler, the controllers) get a protobuf stream; kubectl's tables and custom
	// resources stay JSON.
	protobuf := convertor == nil && prefersProtobuf(r) && protobufWatchable(req.storage)
	if protobuf {
		w.Header().Set("Content-Type", protobufWatchContentType)
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	var frame []byte // each event's frame, built in place of the one before
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if ev.Type == watch.Bookmark && !opts.AllowWatchBookmarks {
				continue
			}
			obj := ev.Object
			if convertor != nil && ev.Type != watch.Error && ev.Type != watch.Bookmark {
				table, err := convertor.ConvertToTable(ctx, obj, tableOpts)
				if err != nil {
					obj, ev.Type = errorToStatus(err), watch.Error
				} else {
					h.setRowKinds(table)
					obj = table
					// Later events reuse the columns kubectl already has.
					noHeaders := *tableOpts
					noHeaders.NoHeaders = true
					tableOpts = &noHeaders
				}
			}
			var data []byte
			if obj == ev.Object && ev.Type != watch.Error && ev.Type != watch.Bookmark {
				// The watch cache's own object, shared by every watcher of this event.
				data, err = watchEncodings.encode(obj, h.gv.GroupVersion, protobuf)
			} else {
				data, err = runtime.Encode(watchEncoder(obj, h.gv.GroupVersion, protobuf), obj)
			}
			if err != nil {
				status := errorToStatus(apierrors.NewInternalError(err))
				data, _ = runtime.Encode(watchEncoder(status, h.gv.GroupVersion, protobuf), status)
				ev.Type = watch.Error
			}
			// Write has copied the frame out when it returns.
			if protobuf {
				if frame, err = appendProtobufWatchFrame(frame[:0], ev.Type, data); err != nil {
					return
				}
			} else {
				frame = appendWatchEventLine(frame[:0], ev.Type, data)
			}
			if _, err := w.Write(frame); err != nil {
				return
			}
			if len(wi.ResultChan()) == 0 {
				// Events already queued go out in the same write: one frame, TLS
				// record and syscall for a burst instead of one each (kube's serveWatch).
				flusher.Flush()
			}
			h.metrics.watchEvents.WithLabelValues(req.gvr.Group, req.gvr.Version, req.gvr.Resource).Inc()
			if ev.Type == watch.Error {
				return
			}
		}
	}
}

var errNoFlusher = errors.New("the response writer cannot stream a watch")

// appendWatchEventLine appends to line one encoded object framed as a metav1.WatchEvent
// line, {"type":"<type>","object":<object>}\n. It is written out rather than marshalled:
// encoding/json would validate and compact the already-encoded object again, a cost
// paid per event and per watcher (docs/performance.md). The encoder's trailing newline
// is dropped, so each event stays one line.
func appendWatchEventLine(line []byte, t watch.EventType, object []byte) []byte {
	object = bytes.TrimRight(object, "\n")
	line = slices.Grow(line, len(`{"type":"","object":}`)+len(t)+len(object)+1)
	line = append(line, `{"type":"`...)
	line = append(line, t...)
	line = append(line, `","object":`...)
	line = append(line, object...)
	return append(line, "}\n"...)
}
