package pleg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/kubelet/container"
)

// Runtime is what the PLEG needs from the container runtime; the kubelet's
// kuberuntime.Manager implements it.
type Runtime interface {
	// GetPods lists every pod the runtime has (all=true: also exited
	// containers and not-ready sandboxes).
	GetPods(ctx context.Context, all bool) ([]*container.Pod, error)
	// GetPodStatus reads the full status of one pod.
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

const (
	// RelistPeriod is how often the runtime is relisted (kubelet: 1 s).
	RelistPeriod = time.Second
	// RelistThreshold is how old the last relist may be before the PLEG is
	// unhealthy and the node NotReady (kubelet: 3 min).
	RelistThreshold = 3 * time.Minute
	// ChannelCapacity bounds the undelivered events; a full channel drops
	// events (the periodic resync repairs what they would have triggered).
	ChannelCapacity = 1000
)

type plegContainerState string

const (
	plegContainerRunning     plegContainerState = "running"
	plegContainerExited      plegContainerState = "exited"
	plegContainerUnknown     plegContainerState = "unknown"
	plegContainerNonExistent plegContainerState = "non-existent"
)

func convertState(s container.State) plegContainerState {
	switch s {
	case container.ContainerStateRunning:
		return plegContainerRunning
	case container.ContainerStateExited:
		return plegContainerExited
	}
	// Created containers count as unknown, as in kubelet: they have not
	// run yet, so there is nothing to react to.
	return plegContainerUnknown
}

type podRecord struct {
	old     *container.Pod
	current *container.Pod
}

// GenericPLEG relists the runtime periodically and diffs each relist with the
// previous one. Only pods with events (or whose inspection failed last time)
// are inspected with GetPodStatus, and the cache's global timestamp then
// vouches for the others. Mirrors pleg.GenericPLEG, with one addition:
// RequestRelist, which the pod workers call when a sync ends so that what the
// sync did (containers started or killed) is seen at once instead of up to a
// relist period later.
type GenericPLEG struct {
	runtime      Runtime
	cache        *container.Cache
	eventChannel chan *PodLifecycleEvent
	logger       *slog.Logger
	// relistRequests holds at most one pending RequestRelist: requests that
	// arrive while one is pending are served by the same relist.
	relistRequests chan struct{}

	// relistMu serialises relists (Run's loop and direct Relist calls).
	relistMu        sync.Mutex
	podRecords      map[types.UID]*podRecord
	podsToReinspect map[types.UID]*container.Pod

	timeMu          sync.Mutex
	relistTime      time.Time
	relistPeriod    time.Duration
	relistThreshold time.Duration
}

// NewGenericPLEG returns a PLEG over runtime that writes statuses to cache
// and emits events on a channel of capacity ChannelCapacity; relistPeriod 0
// means RelistPeriod; logger nil means slog.Default().
func NewGenericPLEG(runtime Runtime, cache *container.Cache, relistPeriod time.Duration, logger *slog.Logger) *GenericPLEG {
	if relistPeriod == 0 {
		relistPeriod = RelistPeriod
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &GenericPLEG{
		runtime:         runtime,
		cache:           cache,
		eventChannel:    make(chan *PodLifecycleEvent, ChannelCapacity),
		relistPeriod:    relistPeriod,
		relistThreshold: RelistThreshold,
		logger:          logger,
		relistRequests:  make(chan struct{}, 1),
		podRecords:      map[types.UID]*podRecord{},
		podsToReinspect: map[types.UID]*container.Pod{},
	}
}

// Watch returns the channel the events are sent on (the sync loop's plegCh).
func (g *GenericPLEG) Watch() <-chan *PodLifecycleEvent { return g.eventChannel }

// Run relists every relist period, and soon after each RequestRelist, until
// ctx ends.
func (g *GenericPLEG) Run(ctx context.Context) {
	for {
		g.Relist(ctx)
		g.timeMu.Lock()
		period := g.relistPeriod
		g.timeMu.Unlock()
		t := time.NewTimer(period)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-g.relistRequests:
			t.Stop()
		}
	}
}

// setRelistTiming changes the relist period (from the next wait of Run on) and
// the health threshold, as kube's Update(relistDuration) does when the Evented
// PLEG starts or falls back.
func (g *GenericPLEG) setRelistTiming(period, threshold time.Duration) {
	g.timeMu.Lock()
	defer g.timeMu.Unlock()
	g.relistPeriod, g.relistThreshold = period, threshold
}

// RequestRelist asks Run for a relist as soon as the current one (if any)
// ends, without waiting for the period; it never blocks. A relist that starts
// after the call sees every runtime change made before it, and its cache
// timestamp is later than the call. The pod workers call it when a sync ends:
// kube's generic PLEG leaves that pod's next sync waiting for the next
// periodic relist (up to 1 s; the TODO in its pod_workers.go), which bounds
// pod startup latency from below.
// The pod's uid is what an EventedPLEG inspects; a relist covers every pod,
// so it is not needed here ("" asks for a relist on no pod's behalf).
func (g *GenericPLEG) RequestRelist(types.UID) {
	select {
	case g.relistRequests <- struct{}{}:
	default:
	}
}

// Healthy reports an error when no relist completed within the threshold
// (RelistThreshold, or EventedRelistThreshold under an EventedPLEG) or none
// ever did, which makes the node NotReady.
func (g *GenericPLEG) Healthy() (bool, error) {
	g.timeMu.Lock()
	last, threshold := g.relistTime, g.relistThreshold
	g.timeMu.Unlock()
	if last.IsZero() {
		return false, fmt.Errorf("pleg has yet to be successful")
	}
	if elapsed := time.Since(last); elapsed > threshold {
		return false, fmt.Errorf("pleg was last seen active %v ago; threshold is %v", elapsed, threshold)
	}
	return true, nil
}

// Relist lists the runtime once, emits the events of what changed and
// refreshes the cache for the pods that changed. A failed list changes
// nothing (and leaves the PLEG's health to age). Mirrors GenericPLEG.Relist.
func (g *GenericPLEG) Relist(ctx context.Context) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()

	// The timestamp is taken before listing: the cache may then vouch that
	// nothing changed before it, never after.
	timestamp := time.Now()
	pods, err := g.runtime.GetPods(ctx, true)
	if err != nil {
		if ctx.Err() == nil {
			g.logger.Error("PLEG: unable to list pods", "err", err)
		}
		return
	}
	g.timeMu.Lock()
	g.relistTime = timestamp
	g.timeMu.Unlock()

	g.setCurrent(pods)
	needsReinspection := map[types.UID]*container.Pod{}
	for pid, rec := range g.podRecords {
		events := ComputeEvents(pid, rec.old, rec.current)
		_, reinspect := g.podsToReinspect[pid]
		if len(events) == 0 && !reinspect {
			continue
		}
		// A failed inspection keeps the old record, so the change is seen
		// again, and inspected again, at the next relist.
		if err := g.updateCache(ctx, rec.current, pid); err != nil {
			if ctx.Err() == nil {
				g.logger.Error("PLEG: ignoring events for pod", "podUID", pid, "err", err)
			}
			needsReinspection[pid] = rec.current
			continue
		}
		g.updateRecord(pid)
		for _, e := range events {
			if e.Type != ContainerChanged {
				g.send(e)
			}
		}
	}
	// After every changed pod is in the cache, the cache as a whole is as
	// fresh as this relist.
	g.cache.UpdateTime(timestamp)
	g.podsToReinspect = needsReinspection
}

// send hands e to the sync loop; a full channel drops it (the periodic resync
// repairs what it would have triggered).
func (g *GenericPLEG) send(e *PodLifecycleEvent) {
	select {
	case g.eventChannel <- e:
	default:
		g.logger.Error("PLEG: event channel is full, discarding event", "podUID", e.ID, "type", e.Type)
	}
}

// setCurrent records this relist's pods as current, keeping the previous
// relist's as old.
func (g *GenericPLEG) setCurrent(pods []*container.Pod) {
	for _, r := range g.podRecords {
		r.current = nil
	}
	for _, p := range pods {
		if r, ok := g.podRecords[p.ID]; ok {
			r.current = p
		} else {
			g.podRecords[p.ID] = &podRecord{current: p}
		}
	}
}

// updateRecord makes the current view the old one; a pod no longer listed is
// forgotten.
func (g *GenericPLEG) updateRecord(pid types.UID) {
	r, ok := g.podRecords[pid]
	if !ok {
		return
	}
	if r.current == nil {
		delete(g.podRecords, pid)
		return
	}
	r.old = r.current
}

// updateCache inspects pod and stores its status; a pod the runtime no longer
// has is removed from the cache.
func (g *GenericPLEG) updateCache(ctx context.Context, pod *container.Pod, pid types.UID) error {
	if pod == nil {
		g.cache.Delete(pid)
		return nil
	}
	timestamp := time.Now()
	status, err := g.runtime.GetPodStatus(ctx, pod.ID, pod.Name, pod.Namespace)
	if err == nil {
		status.IPs = g.getPodIPs(pid, status)
	}
	g.cache.Set(pod.ID, status, err, timestamp)
	return err
}

// getPodIPs keeps the last known pod IPs once every sandbox has stopped: the
// API keeps showing a finished pod's IP. Mirrors GenericPLEG.getPodIPs.
func (g *GenericPLEG) getPodIPs(pid types.UID, status *container.PodStatus) []string {
	if len(status.IPs) != 0 {
		return status.IPs
	}
	for _, s := range status.SandboxStatuses {
		if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			return status.IPs
		}
	}
	old, err := g.cache.Get(pid)
	if err != nil || old == nil {
		return nil
	}
	return old.IPs
}

// ComputeEvents returns the events that turn pod old into pod current (either
// may be nil): per container or sandbox, by id, the state transition.
// Mirrors pleg's computeEvents over getContainersFromPods.
func ComputeEvents(pid types.UID, old, current *container.Pod) []*PodLifecycleEvent {
	var events []*PodLifecycleEvent
	seen := map[string]bool{}
	for _, p := range []*container.Pod{old, current} {
		if p == nil {
			continue
		}
		for _, list := range [][]*container.Container{p.Containers, p.Sandboxes} {
			for _, c := range list {
				if seen[c.ID.ID] {
					continue
				}
				seen[c.ID.ID] = true
				events = append(events, generateEvents(pid, c.ID.ID, containerState(old, c.ID), containerState(current, c.ID))...)
			}
		}
	}
	return events
}

func containerState(pod *container.Pod, id container.ContainerID) plegContainerState {
	if pod == nil {
		return plegContainerNonExistent
	}
	if c := pod.FindContainerByID(id); c != nil {
		return convertState(c.State)
	}
	if c := pod.FindSandboxByID(id); c != nil {
		return convertState(c.State)
	}
	return plegContainerNonExistent
}

func generateEvents(pid types.UID, cid string, oldState, newState plegContainerState) []*PodLifecycleEvent {
	if oldState == newState {
		return nil
	}
	switch newState {
	case plegContainerRunning:
		return []*PodLifecycleEvent{{ID: pid, Type: ContainerStarted, Data: cid}}
	case plegContainerExited:
		return []*PodLifecycleEvent{{ID: pid, Type: ContainerDied, Data: cid}}
	case plegContainerUnknown:
		return []*PodLifecycleEvent{{ID: pid, Type: ContainerChanged, Data: cid}}
	}
	// Gone: a container that was not seen exiting died first.
	if oldState == plegContainerExited {
		return []*PodLifecycleEvent{{ID: pid, Type: ContainerRemoved, Data: cid}}
	}
	return []*PodLifecycleEvent{
		{ID: pid, Type: ContainerDied, Data: cid},
		{ID: pid, Type: ContainerRemoved, Data: cid},
	}
}
