package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/internal/httpstatus"
	kubecontainer "skiff.dev/services/kubelet/container"
)

// logPollInterval is how often a followed log is checked for new lines and
// its container for having stopped.
const logPollInterval = 100 * time.Millisecond

// logOptions are the query parameters of /containerLogs, kube's
// PodLogOptions: follow, previous, timestamps, tailLines, sinceSeconds,
// sinceTime (RFC 3339), limitBytes. A negative or zero count means none.
type logOptions struct {
	follow, previous, timestamps bool
	tailLines                    int64 // -1: all
	since                        time.Time
	limitBytes                   int64 // 0: no limit
}

func parseLogOptions(r *http.Request) (logOptions, error) {
	q := r.URL.Query()
	o := logOptions{tailLines: -1}
	var err error
	boolean := func(k string) bool {
		v := q.Get(k)
		if v == "" {
			return false
		}
		b, perr := strconv.ParseBool(v)
		if perr != nil && err == nil {
			err = fmt.Errorf("%s: %q is not a boolean", k, v)
		}
		return b
	}
	integer := func(k string, def int64) int64 {
		v := q.Get(k)
		if v == "" {
			return def
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if (perr != nil || n < 0) && err == nil {
			err = fmt.Errorf("%s: %q is not a non-negative integer", k, v)
		}
		return n
	}
	o.follow, o.previous, o.timestamps = boolean("follow"), boolean("previous"), boolean("timestamps")
	o.tailLines = integer("tailLines", -1)
	o.limitBytes = integer("limitBytes", 0)
	if s := integer("sinceSeconds", 0); s > 0 {
		o.since = time.Now().Add(-time.Duration(s) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		t, perr := time.Parse(time.RFC3339, v)
		if perr != nil && err == nil {
			err = fmt.Errorf("sinceTime: %q is not an RFC 3339 time", v)
		}
		o.since = t
	}
	if err != nil {
		return o, apierrors.NewBadRequest(err.Error())
	}
	return o, nil
}

// serveContainerLogs writes a container's log as plain text. Errors before
// the first byte are Statuses: 404 no such pod, 400 no such container, a
// container that never started, or no previous instance for previous=true.
// Mirrors kubelet's getContainerLogs and kuberuntime's ReadLogs.
func (s *Server) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	opts, err := parseLogOptions(r)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	pod, err := s.pod(r)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	name := r.PathValue("container")
	if err := hasContainer(pod, name); err != nil {
		httpstatus.Write(w, err)
		return
	}
	status, ok := s.host.GetPodStatus(pod.UID)
	if !ok {
		status = pod.Status
	}
	id, err := logContainerID(pod.Name, status, name, opts.previous)
	if err != nil {
		httpstatus.Write(w, err)
		return
	}
	st, err := s.runtime.ContainerStatus(r.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("container status: %w", err)))
		return
	}
	f, err := os.Open(st.GetStatus().GetLogPath())
	if err != nil {
		httpstatus.Write(w, apierrors.NewInternalError(fmt.Errorf("open log of container %q: %w", name, err)))
		return
	}
	defer f.Close()

	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	running := func(ctx context.Context) bool {
		st, err := s.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err == nil && st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	err = readLogs(r.Context(), f, opts, w, running)
	if err != nil && !errors.Is(err, errLimitReached) && r.Context().Err() == nil {
		s.logger.Debug("read container log", "pod", pod.Name, "container", name, "err", err)
	}
}

// logContainerID is the runtime ID of the instance of container name whose log a
// request reads, chosen from the pod's status as the kubelet last computed it: with
// previous, the last terminated instance (lastState.terminated); otherwise the running
// one, else the one that terminated, else the last terminated (a container waiting out
// CrashLoopBackOff shows the run that crashed, and so does previous). Errors are 400s
// with kube's messages: no such status, no previous instance, never started. Mirrors
// kubelet's validateContainerLogStatus.
func logContainerID(podName string, status v1.PodStatus, name string, previous bool) (string, error) {
	var cs *v1.ContainerStatus
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				cs = &list[i]
			}
		}
	}
	if cs == nil {
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", name, podName))
	}
	last := cs.LastTerminationState.Terminated
	var id string
	switch state := cs.State; {
	case previous:
		if last == nil || last.ContainerID == "" {
			return "", apierrors.NewBadRequest(fmt.Sprintf("previous terminated container %q in pod %q not found", name, podName))
		}
		id = last.ContainerID
	case state.Running != nil:
		id = cs.ContainerID
	case state.Terminated != nil && state.Terminated.ContainerID != "":
		id = state.Terminated.ContainerID
	case last != nil && last.ContainerID != "":
		id = last.ContainerID
	case state.Terminated != nil:
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is terminated", name, podName))
	default:
		reason := "ContainerCreating"
		if state.Waiting != nil && state.Waiting.Reason != "" {
			reason = state.Waiting.Reason
		}
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start: %s", name, podName, reason))
	}
	parsed := kubecontainer.ParseContainerID(id)
	if parsed.ID == "" {
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q has no runtime ID yet (%q)", name, podName, id))
	}
	return parsed.ID, nil
}

// errLimitReached ends a read at limitBytes.
var errLimitReached = errors.New("limitBytes reached")

// logWriter writes entries' content with the options applied.
type logWriter struct {
	w       io.Writer
	opts    logOptions
	written int64
}

func (lw *logWriter) write(e criolog.Entry) error {
	if !lw.opts.since.IsZero() && e.Time.Before(lw.opts.since) {
		return nil
	}
	var line []byte
	if lw.opts.timestamps {
		line = append(line, e.Time.Format(time.RFC3339Nano)...)
		line = append(line, ' ')
	}
	line = append(line, e.Content...)
	if e.Tag == criolog.Full {
		line = append(line, '\n')
	}
	if lw.opts.limitBytes > 0 {
		if room := lw.opts.limitBytes - lw.written; int64(len(line)) > room {
			line = line[:room]
		}
	}
	n, err := lw.w.Write(line)
	lw.written += int64(n)
	if err != nil {
		return err
	}
	if lw.opts.limitBytes > 0 && lw.written >= lw.opts.limitBytes {
		return errLimitReached
	}
	return nil
}

// readLogs writes the CRI log in f to w: the last tailLines lines (all when
// negative), then, with follow, new lines as they arrive until running
// reports the container stopped (and the rest is written) or ctx ends.
func readLogs(ctx context.Context, f io.Reader, opts logOptions, w io.Writer, running func(context.Context) bool) error {
	rd := bufio.NewReader(f)
	lw := &logWriter{w: w, opts: opts}
	flush := func() {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	var partial []byte
	// next returns the next complete line, or false at the current end.
	next := func() ([]byte, bool, error) {
		line, err := rd.ReadBytes('\n')
		partial = append(partial, line...)
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		out := partial
		partial = nil
		return out, true, nil
	}

	// What is there now, tailed.
	var entries []criolog.Entry
	for {
		line, ok, err := next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if e, perr := criolog.ParseLine(line); perr == nil {
			entries = append(entries, e)
		}
	}
	if opts.tailLines >= 0 {
		start, lines := len(entries), int64(0)
		for start > 0 {
			if entries[start-1].Tag == criolog.Full {
				if lines == opts.tailLines {
					break
				}
				lines++
			}
			start--
		}
		entries = entries[start:]
	}
	for _, e := range entries {
		if err := lw.write(e); err != nil {
			return err
		}
	}
	flush()
	if !opts.follow {
		return nil
	}

	ticker := time.NewTicker(logPollInterval)
	defer ticker.Stop()
	for {
		wrote := false
		for {
			line, ok, err := next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if e, perr := criolog.ParseLine(line); perr == nil {
				if err := lw.write(e); err != nil {
					return err
				}
				wrote = true
			}
		}
		if wrote {
			flush()
		}
		if !running(ctx) {
			// The container's last lines were written before it stopped;
			// one more read picks up what arrived since the last one.
			for {
				line, ok, err := next()
				if err != nil || !ok {
					flush()
					return err
				}
				if e, perr := criolog.ParseLine(line); perr == nil {
					if err := lw.write(e); err != nil {
						return err
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}
