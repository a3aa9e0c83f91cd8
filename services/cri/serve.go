// Package cri serves and dials CRI runtimes over gRPC on unix sockets. The
// kubelet reaches every runtime — containerd, CRI-O, or skiff's built-in
// `process` and `sim` (subpackages) — only through Dial, and the built-in
// ones are served with Serve, so the kubelet's code path is the same for all.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/internal/tracing"
)

// MaxMsgSize is the largest CRI message, in bytes, either side accepts: the
// kubelet's limit for its CRI client (16 MiB).
const MaxMsgSize = 16 << 20

// GracefulStopTimeout bounds how long Serve waits for in-flight RPCs once its
// context is done before it cuts them off.
const GracefulStopTimeout = 5 * time.Second

// Serve serves rs and is as a CRI runtime on the unix socket socketPath until
// ctx is done, then stops gracefully (at most GracefulStopTimeout, then
// forcibly) and removes the socket. It creates the socket's directory, removes
// a stale socket file left by a dead server, and refuses to replace a socket
// that a live server still answers on or a path that is not a socket. The
// socket is mode 0600: whoever can reach a CRI socket can run anything on the
// node. It returns nil after a stop caused by ctx, otherwise the error that
// ended serving. Servers get OpenTelemetry spans from the global tracer
// provider when tracing is set up (none otherwise), so the runtime's side of
// each CRI call joins the kubelet's trace.
func Serve(ctx context.Context, socketPath string, rs runtimeapi.RuntimeServiceServer, is runtimeapi.ImageServiceServer) error {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return fmt.Errorf("serve CRI: %w", err)
	}
	if err := removeStaleSocket(socketPath); err != nil {
		return fmt.Errorf("serve CRI: %w", err)
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("serve CRI: %w", err)
	}
	defer os.Remove(socketPath)
	if err := os.Chmod(socketPath, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("serve CRI: %w", err)
	}

	// Streams (GetContainerEvents) never end by themselves: they are ended when
	// serving stops, as kube-apiserver ends its watches, so that a graceful stop
	// waits only for the unary calls in flight.
	stopping, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxMsgSize),
		grpc.MaxSendMsgSize(MaxMsgSize),
		tracing.GRPCServerOption(nil),
		grpc.StreamInterceptor(endStreamsWith(stopping)),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, rs)
	runtimeapi.RegisterImageServiceServer(srv, is)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve CRI on %s: %w", socketPath, err)
	case <-ctx.Done():
	}

	stopStreams()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(GracefulStopTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		srv.Stop()
		<-stopped
	}
	<-served
	return nil
}

// endStreamsWith returns a stream interceptor whose handlers' contexts also end when
// stopping does.
func endStreamsWith(stopping context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		return handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
	}
}

// streamWithContext is a grpc.ServerStream with a context of its own.
type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

// removeStaleSocket removes path if it is a socket no server answers on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("%s is in use by a running server", path)
	}
	return os.Remove(path)
}

// Dial connects to the CRI runtime at endpoint — "unix:///path/to/sock" or a
// plain path — and waits until the connection is ready or ctx is done (then
// it returns ctx's error). Messages up to MaxMsgSize are accepted, and calls
// carry OpenTelemetry trace context from the global propagator. Other schemes
// (tcp://, npipe://) are refused.
func Dial(ctx context.Context, endpoint string) (*grpc.ClientConn, error) {
	path, err := socketPathOf(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize)),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		// A local socket is cheap to retry: a runtime started alongside the
		// kubelet (the all-in-one binary) is reached within ~100 ms of
		// listening instead of after gRPC's default 1 s backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("dial CRI runtime %s: %w", endpoint, err)
	}
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return conn, nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			conn.Close()
			return nil, fmt.Errorf("dial CRI runtime %s (last state %s): %w", endpoint, state, ctx.Err())
		}
	}
}

func socketPathOf(endpoint string) (string, error) {
	path := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if scheme != "unix" {
			return "", fmt.Errorf("CRI endpoint %q: only unix sockets are supported", endpoint)
		}
		path = rest
	}
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", fmt.Errorf("CRI endpoint %q: %w", endpoint, err)
		}
		path = abs
	}
	if path == "" || path == "/" {
		return "", fmt.Errorf("CRI endpoint %q: no socket path", endpoint)
	}
	return path, nil
}
