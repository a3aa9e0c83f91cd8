package prober

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/events"
	"skiff.dev/services/kubelet/prober/httpget"
	"skiff.dev/services/kubelet/prober/results"
)

// probeType is which of a container's probes a worker runs.
type probeType int

const (
	liveness probeType = iota
	readiness
	startup
)

// String returns the probe type as kube's events spell it ("Liveness").
func (t probeType) String() string {
	switch t {
	case liveness:
		return "Liveness"
	case readiness:
		return "Readiness"
	case startup:
		return "Startup"
	}
	return "UNKNOWN"
}

// maxProbeRetries is how often an attempt that errored (not failed: the
// probe could not be run) is retried before its result is dropped.
const maxProbeRetries = 3

// prober runs one probe of a container and reports failures as events.
// Mirrors kubelet's prober.
type prober struct {
	runner    container.CommandRunner
	http      *http.Client
	recorder  record.EventRecorder
	userAgent string
}

// probe runs container c's probe of type t once (retrying errors) and
// returns Success or Failure; an error means the probe could not be run and
// its result must be thrown away. A failure records an Unhealthy event
// ("Liveness probe failed: <output>"), a warning a ProbeWarning one. Mirrors
// prober.probe.
func (pb *prober) probe(ctx context.Context, t probeType, pod *v1.Pod, status v1.PodStatus, c *v1.Container, id container.ContainerID) (results.Result, error) {
	spec := probeSpec(t, c)
	if spec == nil {
		return results.Success, nil
	}
	var (
		result probeResult
		output string
		err    error
	)
	for range maxProbeRetries {
		result, output, err = pb.runProbe(ctx, spec, pod, status, c, id)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		pb.recordContainerEvent(pod, c, v1.EventTypeWarning, events.ContainerUnhealthy, "%s probe errored and resulted in %s state: %s", t, results.Failure, err)
		return results.Failure, err
	}
	switch result {
	case probeWarning:
		pb.recordContainerEvent(pod, c, v1.EventTypeWarning, events.ContainerProbeWarning, "%s probe warning: %s", t, output)
		return results.Success, nil
	case probeFailure:
		pb.recordContainerEvent(pod, c, v1.EventTypeWarning, events.ContainerUnhealthy, "%s probe failed: %s", t, output)
		return results.Failure, nil
	}
	return results.Success, nil
}

func probeSpec(t probeType, c *v1.Container) *v1.Probe {
	switch t {
	case liveness:
		return c.LivenessProbe
	case readiness:
		return c.ReadinessProbe
	case startup:
		return c.StartupProbe
	}
	return nil
}

// runProbe runs the probe's handler once with its timeout: exec in the
// container, httpGet, tcpSocket or grpc against the pod IP unless the probe
// names a host. Mirrors prober.runProbe.
func (pb *prober) runProbe(ctx context.Context, p *v1.Probe, pod *v1.Pod, status v1.PodStatus, c *v1.Container, id container.ContainerID) (probeResult, string, error) {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	switch {
	case p.Exec != nil:
		return runExec(ctx, pb.runner, id, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := httpget.NewRequest(rctx, p.HTTPGet, c, status.PodIP, pb.userAgent)
		if err != nil {
			return probeFailure, "", err
		}
		result, output := runHTTP(pb.http, req)
		return result, output, nil
	case p.TCPSocket != nil:
		port, err := httpget.ResolveContainerPort(p.TCPSocket.Port, c)
		if err != nil {
			return probeFailure, "", err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = status.PodIP
		}
		result, output := runTCP(ctx, host, port, timeout)
		return result, output, nil
	case p.GRPC != nil:
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		result, output := runGRPC(ctx, status.PodIP, int(p.GRPC.Port), service, timeout, pb.userAgent)
		return result, output, nil
	}
	return probeFailure, "", fmt.Errorf("missing probe handler for %s:%s", pod.Namespace+"/"+pod.Name, c.Name)
}

// recordContainerEvent records an event about container c of pod, with the
// field path kubelet uses (spec.containers{name}).
func (pb *prober) recordContainerEvent(pod *v1.Pod, c *v1.Container, eventType, reason, messageFmt string, args ...any) {
	ref := &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion, FieldPath: fmt.Sprintf("spec.containers{%s}", c.Name),
	}
	pb.recorder.Eventf(ref, eventType, reason, messageFmt, args...)
}
