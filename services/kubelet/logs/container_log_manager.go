// Package logs rotates the log files of running containers: a file grown
// past MaxSize is renamed to <log>.<timestamp> and the runtime told to reopen
// the log at its path (CRI ReopenContainerLog); only the MaxFiles newest
// files of a container (the live one included) are kept. Mirrors kubelet's
// pkg/kubelet/logs (containerLogManager), without compressing rotated files.
package logs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Defaults of Config, kube's containerLogMaxSize and containerLogMaxFiles.
const (
	DefaultMaxSize  = 10 * 1024 * 1024
	DefaultMaxFiles = 5
	// monitorPeriod is how often log sizes are checked, as kubelet's.
	monitorPeriod = 10 * time.Second
	// timestampFormat is the suffix of a rotated file.
	timestampFormat = "20060102-150405"
)

// Config configures a ContainerLogManager.
type Config struct {
	// MaxSize is the size in bytes past which a log is rotated; 0 means
	// DefaultMaxSize.
	MaxSize int64
	// MaxFiles is how many files a container keeps, the live one included;
	// at least 2; 0 means DefaultMaxFiles.
	MaxFiles int
	// Logger receives rotation failures; nil means slog.Default().
	Logger *slog.Logger
	// Clock names rotated files; nil means the real clock.
	Clock clock.Clock
}

// ContainerLogManager rotates the logs of one runtime's running containers.
type ContainerLogManager struct {
	runtime  runtimeapi.RuntimeServiceClient
	maxSize  int64
	maxFiles int
	logger   *slog.Logger
	clock    clock.Clock
}

// NewContainerLogManager returns a manager over rs. Errors: MaxFiles below 2.
func NewContainerLogManager(rs runtimeapi.RuntimeServiceClient, cfg Config) (*ContainerLogManager, error) {
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = DefaultMaxSize
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.MaxFiles < 2 {
		return nil, fmt.Errorf("container log max files %d: want at least 2", cfg.MaxFiles)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &ContainerLogManager{runtime: rs, maxSize: cfg.MaxSize, maxFiles: cfg.MaxFiles, logger: cfg.Logger, clock: cfg.Clock}, nil
}

// Run checks every 10 s until ctx ends.
func (m *ContainerLogManager) Run(ctx context.Context) {
	t := time.NewTicker(monitorPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.RotateLogs(ctx); err != nil && ctx.Err() == nil {
				m.logger.Error("container log rotation", "err", err)
			}
		}
	}
}

// RotateLogs rotates, once, the log of every running container past
// MaxSize and prunes old rotated files. Errors: the runtime cannot list its
// containers; one container's failure is logged and the others go on.
func (m *ContainerLogManager) RotateLogs(ctx context.Context) error {
	resp, err := m.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		return fmt.Errorf("CRI ListContainers: %w", err)
	}
	for _, c := range resp.GetContainers() {
		st, err := m.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.GetId()})
		if err != nil {
			m.logger.Debug("container status for log rotation", "container", c.GetId(), "err", err)
			continue
		}
		path := st.GetStatus().GetLogPath()
		if path == "" {
			continue
		}
		if err := m.rotate(ctx, c.GetId(), path); err != nil {
			m.logger.Error("rotate container log", "container", c.GetId(), "path", path, "err", err)
		}
	}
	return nil
}

func (m *ContainerLogManager) rotate(ctx context.Context, id, path string) error {
	info, err := os.Stat(path)
	if err != nil {
		// The runtime may not have created it yet, or the container just ended.
		return nil
	}
	if info.Size() >= m.maxSize {
		rotated := fmt.Sprintf("%s.%s", path, m.clock.Now().Format(timestampFormat))
		if err := os.Rename(path, rotated); err != nil {
			return err
		}
		if _, err := m.runtime.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
			// The runtime still writes to the renamed file: put it back.
			if rerr := os.Rename(rotated, path); rerr != nil {
				return fmt.Errorf("CRI ReopenContainerLog: %v; and restoring %s: %w", err, path, rerr)
			}
			return fmt.Errorf("CRI ReopenContainerLog: %w", err)
		}
	}
	return m.prune(path)
}

// prune removes the oldest rotated files of path beyond MaxFiles-1.
func (m *ContainerLogManager) prune(path string) error {
	rotated, err := filepath.Glob(path + ".*")
	if err != nil {
		return err
	}
	sort.Strings(rotated) // timestamps sort by time
	for len(rotated) > m.maxFiles-1 {
		if err := os.Remove(rotated[0]); err != nil && !os.IsNotExist(err) {
			return err
		}
		rotated = rotated[1:]
	}
	return nil
}
