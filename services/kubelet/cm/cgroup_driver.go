package cm

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeConfigAttempts and runtimeConfigRetryDelay bound how long the kubelet
// asks a runtime that is still starting (kube: 3 tries, 2 s apart).
const (
	runtimeConfigAttempts   = 3
	runtimeConfigRetryDelay = 2 * time.Second
	runtimeConfigTimeout    = 10 * time.Second
)

// CgroupDriverFromCRI returns the cgroup driver the runtime uses, asked with
// CRI RuntimeConfig, as kube's kubelet does (KubeletCgroupDriverFromCRI, on
// by default since 1.31): the runtime's answer wins over configured. A
// runtime that answers Unimplemented (containerd before 1.7, skiff's built-in
// runtimes) or with no linux section leaves configured. Errors: the call
// failing another way three times, 2 s apart; an unknown driver; ctx ending.
// Mirrors cmd/kubelet/app getCgroupDriverFromCRI.
func CgroupDriverFromCRI(ctx context.Context, client runtimeapi.RuntimeServiceClient, configured CgroupDriver, logger *slog.Logger) (CgroupDriver, error) {
	var resp *runtimeapi.RuntimeConfigResponse
	var err error
	for i := range runtimeConfigAttempts {
		// A runtime still starting (its socket not yet there) is waited for,
		// up to runtimeConfigTimeout a try.
		cctx, cancel := context.WithTimeout(ctx, runtimeConfigTimeout)
		resp, err = client.RuntimeConfig(cctx, &runtimeapi.RuntimeConfigRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			break
		}
		if status.Code(err) == codes.Unimplemented {
			logger.Info("the CRI runtime does not implement RuntimeConfig; using the configured cgroup driver", "cgroupDriver", configured)
			return configured, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if i == runtimeConfigAttempts-1 {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(runtimeConfigRetryDelay):
		}
	}
	if err != nil {
		return "", fmt.Errorf("CRI RuntimeConfig: %w", err)
	}
	linux := resp.GetLinux()
	if linux == nil {
		return configured, nil
	}
	var driver CgroupDriver
	switch d := linux.GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		driver = CgroupDriverSystemd
	case runtimeapi.CgroupDriver_CGROUPFS:
		driver = CgroupDriverCgroupfs
	default:
		return "", fmt.Errorf("the CRI runtime answered an unknown cgroup driver %d", d)
	}
	if driver != configured {
		logger.Info("using the cgroup driver the CRI runtime uses", "cgroupDriver", driver, "configured", configured)
	}
	return driver, nil
}
