package kuberuntime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodStateProvider tells garbage collection which pods' leftovers may go.
// The kubelet's pod workers implement it.
type PodStateProvider interface {
	// ShouldPodContentBeRemoved reports whether everything of pod uid
	// (containers, sandboxes, logs) may be deleted: the pod is gone from the
	// API server, or was deleted and has terminated.
	ShouldPodContentBeRemoved(uid types.UID) bool
}

// maxPerPodContainer is how many exited instances of each container the
// runtime keeps for a live pod: the last one, which holds the restart count,
// the last termination state and `kubectl logs --previous`. Kubelet's default
// (--maximum-dead-containers-per-container=1).
const maxPerPodContainer = 1

// GarbageCollect removes what the runtime keeps after containers exit: for
// pods whose content may be removed, every container, every sandbox that is
// not ready and the pod's log directory; for other pods, exited containers
// beyond the newest of each name and exited sandboxes beyond the newest.
// Running containers and ready sandboxes are never touched (KillPod stops
// them first). Unless allSourcesReady, only the per-pod limits apply, since
// the kubelet does not yet know every pod it should run. Mirrors
// kuberuntime's containerGC.GarbageCollect.
func (m *Manager) GarbageCollect(ctx context.Context, podState PodStateProvider, allSourcesReady bool) error {
	var errs []error
	if err := m.evictContainers(ctx, podState, allSourcesReady); err != nil {
		errs = append(errs, err)
	}
	if err := m.evictSandboxes(ctx, podState, allSourcesReady); err != nil {
		errs = append(errs, err)
	}
	if allSourcesReady {
		if err := m.evictPodLogsDirectories(ctx, podState); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) evictContainers(ctx context.Context, podState PodStateProvider, allSourcesReady bool) error {
	containers, err := m.listContainers(ctx, false, nil)
	if err != nil {
		return err
	}
	type unitKey struct {
		uid  types.UID
		name string
	}
	units := map[unitKey][]*runtimeapi.Container{}
	for _, c := range containers {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		info := getContainerInfoFromLabels(c.GetLabels())
		if info.PodUID == "" {
			continue
		}
		k := unitKey{info.PodUID, info.ContainerName}
		units[k] = append(units[k], c)
	}
	var errs []error
	for k, unit := range units {
		slices.SortFunc(unit, func(a, b *runtimeapi.Container) int { return cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()) })
		keep := maxPerPodContainer
		if allSourcesReady && podState.ShouldPodContentBeRemoved(k.uid) {
			keep = 0
		}
		for _, c := range unit[min(keep, len(unit)):] {
			if err := m.removeContainer(ctx, c.GetId()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) evictSandboxes(ctx context.Context, podState PodStateProvider, allSourcesReady bool) error {
	sandboxes, err := m.listPodSandboxes(ctx, false, nil)
	if err != nil {
		return err
	}
	// Listed after evictContainers: a sandbox that still has containers is
	// in use (for logs, restart counts) and stays.
	containers, err := m.listContainers(ctx, false, nil)
	if err != nil {
		return err
	}
	inUse := map[string]bool{}
	for _, c := range containers {
		inUse[c.GetPodSandboxId()] = true
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, s := range sandboxes {
		uid := types.UID(s.GetMetadata().GetUid())
		if uid == "" {
			continue
		}
		byPod[uid] = append(byPod[uid], s)
	}
	var errs []error
	for uid, list := range byPod {
		slices.SortFunc(list, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()) })
		candidates := list[1:]
		if allSourcesReady && podState.ShouldPodContentBeRemoved(uid) {
			candidates = list
		}
		for _, s := range candidates {
			if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || inUse[s.GetId()] {
				continue
			}
			cctx, cancel := m.callCtx(ctx)
			_, err := m.runtimeService.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()})
			cancel()
			if err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("CRI RemovePodSandbox %s: %w", s.GetId(), err))
				continue
			}
			m.logger.Debug("removed pod sandbox", "pod", s.GetMetadata().GetNamespace()+"/"+s.GetMetadata().GetName(), "sandboxID", s.GetId())
		}
	}
	return errors.Join(errs...)
}

// evictPodLogsDirectories removes the log directories of pods whose content
// may be removed and which the runtime no longer knows.
func (m *Manager) evictPodLogsDirectories(ctx context.Context, podState PodStateProvider) error {
	entries, err := os.ReadDir(m.podLogsDirectory)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pod logs directory: %w", err)
	}
	sandboxes, err := m.listPodSandboxes(ctx, false, nil)
	if err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for _, s := range sandboxes {
		live[types.UID(s.GetMetadata().GetUid())] = true
	}
	var errs []error
	for _, e := range entries {
		uid := parsePodUIDFromLogsDirectory(e.Name())
		if uid == "" || live[uid] || !podState.ShouldPodContentBeRemoved(uid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(m.podLogsDirectory, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
