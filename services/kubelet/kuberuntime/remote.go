// Package kuberuntime is the kubelet's client side of CRI: it turns pod specs
// into RunPodSandbox / PullImage / CreateContainer / StartContainer calls,
// reads runtime state back into the runtime-neutral types of package
// container, and garbage-collects what the runtime keeps after pods end.
// Mirrors kubelet's pkg/kubelet/kuberuntime (kubeGenericRuntimeManager) and
// pkg/kubelet/images.
package kuberuntime

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// maxMsgSize is the largest CRI response accepted (16 MiB), as kubelet's
// remote runtime client allows: ListContainers on a busy node is large.
const maxMsgSize = 16 * 1024 * 1024

// Dial returns a gRPC client connection to the CRI runtime at endpoint, which
// is "unix:///abs/path", "unix:rel/path", a bare filesystem path or
// "tcp://host:port" (containerd may listen on TCP; the connection is plain
// gRPC, as kubelet's, so it belongs on a trusted network). It does not
// block: the connection is made on the first call, so the kubelet may start
// before its runtime. Other schemes are refused with an error. opts are added
// to the dial options (e.g. tracing.GRPCClientOption: a span per CRI call).
func Dial(endpoint string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target, err := criTarget(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		// gRPC's default reconnect backoff grows to 2 minutes; a local
		// socket is cheap to retry, and a runtime that starts after the
		// kubelet should be found within seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial CRI endpoint %q: %w", endpoint, err)
	}
	return conn, nil
}

func criTarget(endpoint string) (string, error) {
	switch {
	case endpoint == "":
		return "", fmt.Errorf("empty CRI endpoint")
	case strings.HasPrefix(endpoint, "unix:"):
		return endpoint, nil
	case strings.HasPrefix(endpoint, "tcp://"):
		hostPort := strings.TrimPrefix(endpoint, "tcp://")
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			return "", fmt.Errorf("CRI endpoint %q: want tcp://host:port: %w", endpoint, err)
		}
		return "dns:///" + hostPort, nil
	case strings.Contains(endpoint, "://"):
		return "", fmt.Errorf("CRI endpoint %q: only unix:// and tcp:// are supported", endpoint)
	case filepath.IsAbs(endpoint):
		return "unix://" + endpoint, nil
	default:
		return "unix:" + endpoint, nil
	}
}
