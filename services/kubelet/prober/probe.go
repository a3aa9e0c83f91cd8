package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"skiff.dev/services/kubelet/container"
)

// probeResult is what one probe attempt found, before thresholds. Warning
// counts as success but is reported (e.g. a redirect to another host).
// Mirrors k8s.io/kubernetes/pkg/probe.Result.
type probeResult string

const (
	probeSuccess probeResult = "success"
	probeWarning probeResult = "warning"
	probeFailure probeResult = "failure"
)

// maxRespBodyLength is how much of an HTTP probe's response body is read
// into its message, in bytes (kube: 10 KiB).
const maxRespBodyLength = 10 * 1 << 10

// maxRedirects is how many redirects an HTTP probe follows (Go's default,
// which kube keeps).
const maxRedirects = 10

// runExec runs cmd in the container with the probe's timeout: exit 0 is
// success, any other exit or a timeout a failure whose message is the
// output. A CRI error is an error (the attempt is retried, then dropped).
// Mirrors pkg/probe/exec.
func runExec(ctx context.Context, runner container.CommandRunner, id container.ContainerID, cmd []string, timeout time.Duration) (probeResult, string, error) {
	out, err := runner.RunInContainer(ctx, id, cmd, timeout)
	var exit *container.ExitError
	switch {
	case err == nil:
		return probeSuccess, string(out), nil
	case errors.As(err, &exit):
		return probeFailure, string(out), nil
	case errors.Is(err, container.ErrCommandTimedOut):
		return probeFailure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return probeFailure, "", err
}

// newProbeHTTPClient returns the client HTTP probes share: no proxy, no
// keep-alive (each probe is a fresh connection, as kube's), certificates not
// verified (kube's probes skip verification), and redirects followed only
// within the same host; a redirect elsewhere ends the chain, which runHTTP
// turns into a warning. Mirrors pkg/probe/http.New.
func newProbeHTTPClient() *http.Client {
	transport := &http.Transport{
		Proxy:              nil,
		DisableKeepAlives:  true,
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kube's probes do not verify.
		DialContext:        (&net.Dialer{}).DialContext,
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= maxRedirects {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		},
	}
}

// runHTTP sends req: a status in [200, 400) is success (a redirect that was
// not followed, a warning), anything else or a transport error a failure.
// Mirrors pkg/probe/http.DoHTTPProbe.
func runHTTP(client *http.Client, req *http.Request) (probeResult, string) {
	resp, err := client.Do(req)
	if err != nil {
		return probeFailure, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRespBodyLength))
	if err != nil {
		return probeFailure, err.Error()
	}
	body := string(b)
	if resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest {
		if resp.StatusCode >= http.StatusMultipleChoices {
			return probeWarning, fmt.Sprintf("Probe terminated redirects, Response body: %v", body)
		}
		return probeSuccess, body
	}
	return probeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
}

// runTCP opens a TCP connection to host:port within timeout: connecting is
// success. Mirrors pkg/probe/tcp.
func runTCP(ctx context.Context, host string, port int, timeout time.Duration) (probeResult, string) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return probeFailure, err.Error()
	}
	_ = conn.Close()
	return probeSuccess, ""
}

// runGRPC calls grpc.health.v1.Health/Check for service on host:port
// (plaintext) within timeout: SERVING is success, any other status or error
// a failure with kube's messages. Mirrors pkg/probe/grpc.
func runGRPC(ctx context.Context, host string, port int, service string, timeout time.Duration, userAgent string) (probeResult, string) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(userAgent))
	if err != nil {
		return probeFailure, fmt.Sprintf("error: failed to connect service %q: %+v", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		s, ok := grpcstatus.FromError(err)
		switch {
		case ok && s.Code() == codes.Unimplemented:
			return probeFailure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", s.Message())
		case ok && s.Code() == codes.DeadlineExceeded:
			return probeFailure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
		}
		return probeFailure, fmt.Sprintf("error: health rpc probe failed: %+v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return probeFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return probeSuccess, ""
}
