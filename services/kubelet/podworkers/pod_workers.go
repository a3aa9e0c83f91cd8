// Package podworkers runs one goroutine per pod UID that drives the pod
// through its lifecycle: syncing (SyncPod, repeatedly) → terminating
// (SyncTerminatingPod, once it succeeds) → terminated (SyncTerminatedPod,
// once). Updates for a pod that arrive while its worker is busy are coalesced
// into the latest one. Mirrors kubelet's pkg/kubelet/pod_workers.go.
package podworkers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/container"
)

// SyncPodType says why a pod update was sent. Mirrors kubetypes.SyncPodType.
type SyncPodType int

// The update types, as in Kubernetes.
const (
	// SyncPodSync is a periodic or event-driven resync.
	SyncPodSync SyncPodType = iota
	// SyncPodUpdate is a change to the pod from its source.
	SyncPodUpdate
	// SyncPodCreate is the first time the pod is seen.
	SyncPodCreate
	// SyncPodKill asks for the pod to be stopped (it left the config, or the
	// kubelet is evicting it).
	SyncPodKill
)

// String returns the Kubernetes name of t ("sync", "update", ...).
func (t SyncPodType) String() string {
	switch t {
	case SyncPodCreate:
		return "create"
	case SyncPodUpdate:
		return "update"
	case SyncPodSync:
		return "sync"
	case SyncPodKill:
		return "kill"
	}
	return "unknown"
}

// PodWorkerState is the lifecycle phase of a pod worker, and so the kind of
// work it does next. Mirrors kubelet's PodWorkerState.
type PodWorkerState int

// The worker states.
const (
	// SyncPod: the pod should be running; SyncPod is called.
	SyncPod PodWorkerState = iota
	// TerminatingPod: the pod is being stopped; SyncTerminatingPod is called
	// until it succeeds.
	TerminatingPod
	// TerminatedPod: nothing runs any more; SyncTerminatedPod cleans up.
	TerminatedPod
)

// String returns the Kubernetes name of s.
func (s PodWorkerState) String() string {
	switch s {
	case SyncPod:
		return "sync"
	case TerminatingPod:
		return "terminating"
	case TerminatedPod:
		return "terminated"
	}
	return "unknown"
}

// KillPodOptions tune a SyncPodKill update.
type KillPodOptions struct {
	// CompletedCh, if set, is closed once the pod has terminated.
	CompletedCh chan<- struct{}
	// PodTerminationGracePeriodSecondsOverride shortens the grace period
	// (seconds); a grace period never grows once set.
	PodTerminationGracePeriodSecondsOverride *int64
}

// UpdatePodOptions is one update for a pod worker. Exactly one of Pod and
// RunningPod is set: RunningPod is for a pod only the runtime knows (an
// orphan), which can only be killed. Mirrors kubelet's UpdatePodOptions.
type UpdatePodOptions struct {
	UpdateType SyncPodType
	// StartTime is when the update was generated, for latency logging.
	StartTime      time.Time
	Pod            *v1.Pod
	RunningPod     *container.Pod
	KillPodOptions *KillPodOptions
}

// PodSyncer does the work of each lifecycle phase; the Kubelet implements
// it. Every method must be safe to call again after an error (the worker
// retries) and should return ctx.Err() promptly when ctx is cancelled, which
// happens when a newer update (such as a deletion) supersedes the current one.
type PodSyncer interface {
	// SyncPod makes the pod run as specified; isTerminal=true means it
	// reached Succeeded or Failed and should now be terminated.
	SyncPod(ctx context.Context, updateType SyncPodType, pod *v1.Pod, podStatus *container.PodStatus) (isTerminal bool, err error)
	// SyncTerminatingPod stops every container of the pod with gracePeriod
	// seconds (nil: the pod's own) and records its final status.
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus, gracePeriod *int64) error
	// SyncTerminatingRuntimePod stops a pod known only to the runtime.
	SyncTerminatingRuntimePod(ctx context.Context, runningPod *container.Pod) error
	// SyncTerminatedPod releases what the terminated pod still holds and
	// reports it finished.
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus) error
}

// PodCache is where workers read the runtime's view of a pod; the PLEG's
// container.Cache implements it.
type PodCache interface {
	GetNewerThan(ctx context.Context, uid types.UID, minTime time.Time) (*container.PodStatus, error)
}

// Relister is the PLEG as the pod workers see it: RequestRelist asks for pod
// uid's status to be read again soon, without blocking. The PLEGs implement it.
type Relister interface {
	RequestRelist(uid types.UID)
}

// Timing defaults, as in kubelet.
const (
	// DefaultBackOffPeriod is how long a worker waits after a failed sync
	// before it is synced again (kubelet's backOffPeriod).
	DefaultBackOffPeriod = 10 * time.Second
	// workerResyncIntervalJitterFactor and workerBackOffPeriodJitterFactor
	// spread the requeues so that pods do not sync in lockstep.
	workerResyncIntervalJitterFactor = 0.5
	workerBackOffPeriodJitterFactor  = 0.5
)

// podSyncStatus is what the pod workers know of one pod UID.
type podSyncStatus struct {
	// ctx is cancelled to abandon the current sync when a more urgent update
	// (termination, a shorter grace period) arrives.
	ctx      context.Context
	cancelFn context.CancelFunc
	// working is true while an update is queued or being processed.
	working bool
	// pendingUpdate is the next update (coalesced: only the latest is
	// kept); activeUpdate the one being, or last, processed.
	pendingUpdate *UpdatePodOptions
	activeUpdate  *UpdatePodOptions

	startedAt     time.Time
	terminatingAt time.Time
	terminatedAt  time.Time
	// gracePeriod is the grace period (seconds) termination was asked with;
	// it only ever decreases.
	gracePeriod int64
	// notifyPostTerminating are closed once the pod has terminated.
	notifyPostTerminating []chan<- struct{}
	// deleted: the pod was deleted in the API or is gone from the config.
	deleted bool
	// observedRuntime: a runtime-only pod was reported for this UID.
	observedRuntime bool
	// finished: SyncTerminatedPod succeeded; the worker has exited.
	finished bool
}

// The lifecycle predicates, as in kubelet's podSyncStatus.
func (s *podSyncStatus) IsTerminationRequested() bool { return !s.terminatingAt.IsZero() }
func (s *podSyncStatus) IsTerminated() bool           { return !s.terminatedAt.IsZero() }
func (s *podSyncStatus) IsFinished() bool             { return s.finished }
func (s *podSyncStatus) IsStarted() bool              { return !s.startedAt.IsZero() }

// WorkType is the kind of work the worker does next.
func (s *podSyncStatus) WorkType() PodWorkerState {
	switch {
	case s.IsTerminated():
		return TerminatedPod
	case s.IsTerminationRequested():
		return TerminatingPod
	}
	return SyncPod
}

// mergeLastUpdate records other as the active update, keeping the most
// recent full Pod when other only has a RunningPod.
func (s *podSyncStatus) mergeLastUpdate(other UpdatePodOptions) {
	opts := s.activeUpdate
	if opts == nil {
		opts = &UpdatePodOptions{}
		s.activeUpdate = opts
	}
	if opts.Pod == nil || other.RunningPod == nil {
		opts.Pod = other.Pod
	}
	opts.RunningPod = other.RunningPod
	if other.KillPodOptions != nil {
		opts.KillPodOptions = other.KillPodOptions
	}
}

// podWork is one unit of work taken by a worker.
type podWork struct {
	WorkType PodWorkerState
	Options  UpdatePodOptions
}

// PodWorkerSync is what SyncKnownPods reports about a worker.
type PodWorkerSync struct {
	// State is the worker's lifecycle phase.
	State PodWorkerState
	// Orphan is true when the pod is no longer in the desired set.
	Orphan bool
	// HasConfig is true when the worker has the pod's spec (not only a
	// runtime pod).
	HasConfig bool
}

// PodWorkers owns the per-pod goroutines. Safe for concurrent use. Mirrors
// kubelet's podWorkers.
type PodWorkers struct {
	syncer         PodSyncer
	cache          PodCache
	relister       Relister
	workQueue      *WorkQueue
	resyncInterval time.Duration
	backOffPeriod  time.Duration
	logger         *slog.Logger

	// ctx is the parent of every sync; Stop cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	podLock sync.Mutex
	// podsSynced is set by the first SyncKnownPods: from then on, a UID
	// without a worker is a pod the kubelet does not want.
	podsSynced      bool
	podUpdates      map[types.UID]chan struct{}
	podSyncStatuses map[types.UID]*podSyncStatus
	stopped         bool
}

// New returns pod workers that call syncer, read runtime state from cache,
// ask relister (nil: none) for a relist after every sync, and requeue pods on
// workQueue: resyncInterval after a successful sync, backOffPeriod after a
// failed one (both with jitter; 0 means 1 min and 10 s). logger nil means
// slog.Default(). Call Stop to end the workers.
func New(syncer PodSyncer, cache PodCache, relister Relister, workQueue *WorkQueue, resyncInterval, backOffPeriod time.Duration, logger *slog.Logger) *PodWorkers {
	if resyncInterval == 0 {
		resyncInterval = time.Minute
	}
	if backOffPeriod == 0 {
		backOffPeriod = DefaultBackOffPeriod
	}
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &PodWorkers{
		syncer:          syncer,
		cache:           cache,
		relister:        relister,
		workQueue:       workQueue,
		resyncInterval:  resyncInterval,
		backOffPeriod:   backOffPeriod,
		logger:          logger,
		ctx:             ctx,
		cancel:          cancel,
		podUpdates:      map[types.UID]chan struct{}{},
		podSyncStatuses: map[types.UID]*podSyncStatus{},
	}
}

// Stop cancels every sync in progress and waits for all worker goroutines to
// exit. Updates after Stop are ignored.
func (p *PodWorkers) Stop() {
	p.podLock.Lock()
	p.stopped = true
	p.podLock.Unlock()
	p.cancel()
	p.wg.Wait()
}

// UpdatePod hands an update to the pod's worker, starting the worker the
// first time. It never blocks on the worker: if the worker is busy, the
// update replaces any update still pending. The pod moves to terminating
// when it is deleted (deletionTimestamp), reaches a terminal phase in the
// API, or a SyncPodKill arrives; a sync in progress is then cancelled. Once
// terminated, the UID accepts no more updates until SyncKnownPods forgets it.
// Mirrors podWorkers.UpdatePod.
func (p *PodWorkers) UpdatePod(options UpdatePodOptions) {
	var (
		isRuntimePod bool
		uid          types.UID
		name, ns     string
	)
	switch {
	case options.RunningPod != nil && options.Pod == nil:
		if options.UpdateType != SyncPodKill {
			p.logger.Info("runtime pods can only be killed; ignoring update", "podUID", options.RunningPod.ID, "updateType", options.UpdateType)
			return
		}
		uid, ns, name = options.RunningPod.ID, options.RunningPod.Namespace, options.RunningPod.Name
		isRuntimePod = true
	case options.Pod != nil:
		options.RunningPod = nil
		uid, ns, name = options.Pod.UID, options.Pod.Namespace, options.Pod.Name
	default:
		return
	}

	p.podLock.Lock()
	defer p.podLock.Unlock()
	if p.stopped {
		return
	}
	now := time.Now()
	status, ok := p.podSyncStatuses[uid]
	firstTime := !ok
	if firstTime {
		status = &podSyncStatus{}
		p.podSyncStatuses[uid] = status
	}

	// A runtime pod carries no spec: prefer any spec this worker already
	// has, and once a runtime pod was seen, drive it to the end.
	pod := options.Pod
	if isRuntimePod {
		status.observedRuntime = true
		switch {
		case status.pendingUpdate != nil && status.pendingUpdate.Pod != nil:
			pod = status.pendingUpdate.Pod
			options.Pod, options.RunningPod = pod, nil
		case status.activeUpdate != nil && status.activeUpdate.Pod != nil:
			pod = status.activeUpdate.Pod
			options.Pod, options.RunningPod = pod, nil
		default:
			pod = &v1.Pod{ObjectMeta: metaFor(options.RunningPod)}
		}
	}

	if status.IsFinished() {
		p.logger.Debug("pod is finished processing, no further updates", "pod", ns+"/"+name, "podUID", uid, "updateType", options.UpdateType)
		return
	}

	var becameTerminating bool
	if !status.IsTerminationRequested() {
		switch {
		case isRuntimePod:
			status.deleted = true
			becameTerminating = true
		case pod.DeletionTimestamp != nil:
			status.deleted = true
			becameTerminating = true
		case pod.Status.Phase == v1.PodFailed || pod.Status.Phase == v1.PodSucceeded:
			becameTerminating = true
		case options.UpdateType == SyncPodKill:
			becameTerminating = true
		}
		if becameTerminating {
			status.terminatingAt = now
			p.logger.Debug("pod begins termination", "pod", ns+"/"+name, "podUID", uid, "updateType", options.UpdateType)
		}
	}

	var gracePeriodShortened bool
	switch {
	case status.IsTerminated():
		// The termination is done; only SyncTerminatedPod remains.
		if options.KillPodOptions != nil && options.KillPodOptions.CompletedCh != nil {
			close(options.KillPodOptions.CompletedCh)
		}
		options.KillPodOptions = nil
	case status.IsTerminationRequested():
		if options.KillPodOptions == nil {
			options.KillPodOptions = &KillPodOptions{}
		}
		if ch := options.KillPodOptions.CompletedCh; ch != nil {
			status.notifyPostTerminating = append(status.notifyPostTerminating, ch)
		}
		gracePeriod, shortened := calculateEffectiveGracePeriod(status, pod, options.KillPodOptions)
		gracePeriodShortened = shortened
		status.gracePeriod = gracePeriod
		// Always passed down, so that SyncTerminatingPod never recomputes it.
		options.KillPodOptions.PodTerminationGracePeriodSecondsOverride = &gracePeriod
	default:
		if options.KillPodOptions != nil && options.KillPodOptions.CompletedCh != nil {
			close(options.KillPodOptions.CompletedCh)
		}
		options.KillPodOptions = nil
	}

	podUpdates, exists := p.podUpdates[uid]
	if !exists {
		// Buffered so that UpdatePod never waits for the worker.
		podUpdates = make(chan struct{}, 1)
		p.podUpdates[uid] = podUpdates
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.podWorkerLoop(uid, podUpdates)
		}()
	}
	if status.pendingUpdate != nil && !status.pendingUpdate.StartTime.IsZero() && status.pendingUpdate.StartTime.Before(options.StartTime) {
		options.StartTime = status.pendingUpdate.StartTime
	}
	status.pendingUpdate = &options
	status.working = true
	select {
	case podUpdates <- struct{}{}:
	default:
	}
	if (becameTerminating || gracePeriodShortened) && status.cancelFn != nil {
		p.logger.Debug("cancelling current pod sync", "pod", ns+"/"+name, "podUID", uid, "workType", status.WorkType())
		status.cancelFn()
	}
}

func metaFor(rp *container.Pod) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: rp.Name, Namespace: rp.Namespace, UID: rp.ID}
}

// calculateEffectiveGracePeriod returns the grace period (seconds, at least
// 1) termination uses: the smallest of what was asked before, the pod's
// deletion grace period and the kill option; the pod's
// terminationGracePeriodSeconds when none was asked. It also reports whether
// an earlier grace period was shortened. Mirrors kubelet's
// calculateEffectiveGracePeriod.
func calculateEffectiveGracePeriod(status *podSyncStatus, pod *v1.Pod, options *KillPodOptions) (int64, bool) {
	gracePeriod := status.gracePeriod
	if o := pod.DeletionGracePeriodSeconds; o != nil && (gracePeriod == 0 || *o < gracePeriod) {
		gracePeriod = *o
	}
	if options != nil {
		if o := options.PodTerminationGracePeriodSecondsOverride; o != nil && (gracePeriod == 0 || *o < gracePeriod) {
			gracePeriod = *o
		}
	}
	if gracePeriod == 0 && pod.Spec.TerminationGracePeriodSeconds != nil {
		gracePeriod = *pod.Spec.TerminationGracePeriodSeconds
	}
	gracePeriod = max(gracePeriod, 1)
	return gracePeriod, status.gracePeriod != 0 && status.gracePeriod != gracePeriod
}

// startPodSync takes the pending update of uid. ok=false means there was
// none; canEverStart=false means the worker should exit.
func (p *PodWorkers) startPodSync(uid types.UID) (ctx context.Context, update podWork, canEverStart, ok bool) {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, found := p.podSyncStatuses[uid]
	if !found {
		return nil, update, false, false
	}
	if status.pendingUpdate == nil {
		status.working = false
		return nil, update, true, false
	}
	update.WorkType = status.WorkType()
	update.Options = *status.pendingUpdate
	status.pendingUpdate = nil
	select {
	case <-p.podUpdates[uid]:
		// Drain: the update just taken is the one that signal was for.
	default:
	}
	if status.ctx == nil || status.ctx.Err() != nil {
		status.ctx, status.cancelFn = context.WithCancel(p.ctx)
	}
	ctx = status.ctx
	if !status.IsStarted() {
		if update.Options.Pod == nil && !(update.Options.RunningPod != nil && update.WorkType == TerminatingPod) {
			// Nothing to start from; cannot happen through UpdatePod.
			status.mergeLastUpdate(update.Options)
			return ctx, update, false, true
		}
		status.startedAt = time.Now()
	}
	status.mergeLastUpdate(update.Options)
	return ctx, update, true, true
}

// podWorkerLoop processes the updates of one pod until the pod is terminated
// or the workers stop.
func (p *PodWorkers) podWorkerLoop(uid types.UID, podUpdates <-chan struct{}) {
	var lastSyncTime time.Time
	for {
		select {
		case <-p.ctx.Done():
			return
		case _, open := <-podUpdates:
			if !open {
				return
			}
		}
		ctx, update, canEverStart, ok := p.startPodSync(uid)
		if !ok {
			continue
		}
		if !canEverStart {
			return
		}
		logger := p.logger.With("podUID", uid, "workType", update.WorkType.String())
		if pod := update.Options.Pod; pod != nil {
			logger = logger.With("pod", pod.Namespace+"/"+pod.Name)
		}

		var isTerminal bool
		err := func() error {
			var status *container.PodStatus
			if update.Options.RunningPod == nil {
				// Wait for a runtime view newer than our last action, so a
				// sync never acts twice on the same stale state.
				var err error
				status, err = p.cache.GetNewerThan(ctx, uid, lastSyncTime)
				if err != nil {
					return fmt.Errorf("read runtime status of pod %s: %w", uid, err)
				}
			}
			var err error
			switch update.WorkType {
			case TerminatedPod:
				err = p.syncer.SyncTerminatedPod(ctx, update.Options.Pod, status)
			case TerminatingPod:
				var gracePeriod *int64
				if o := update.Options.KillPodOptions; o != nil {
					gracePeriod = o.PodTerminationGracePeriodSecondsOverride
				}
				if update.Options.RunningPod != nil {
					err = p.syncer.SyncTerminatingRuntimePod(ctx, update.Options.RunningPod)
				} else {
					err = p.syncer.SyncTerminatingPod(ctx, update.Options.Pod, status, gracePeriod)
				}
			default:
				isTerminal, err = p.syncer.SyncPod(ctx, update.Options.UpdateType, update.Options.Pod, status)
			}
			lastSyncTime = time.Now()
			// What this sync did to the runtime is seen by a relist (or,
			// under the Evented PLEG, an inspection of this pod) that
			// starts now: its events sync the pod again (a started
			// container makes it Running) and its timestamp, later than
			// lastSyncTime, satisfies that sync's GetNewerThan.
			if p.relister != nil {
				p.relister.RequestRelist(uid)
			}
			return err
		}()

		var phaseTransition bool
		switch {
		case errors.Is(err, context.Canceled):
			// Superseded by a newer update, which is queued already.
			logger.Debug("pod sync cancelled")
		case err != nil:
			if errors.Is(err, container.ErrCrashLoopBackOff) || errors.Is(err, container.ErrImagePullBackOff) {
				logger.Debug("pod is backing off", "err", err)
			} else {
				logger.Error("error syncing pod, will retry", "err", err)
			}
		case update.WorkType == TerminatedPod:
			p.completeTerminated(uid)
			return
		case update.WorkType == TerminatingPod:
			if update.Options.RunningPod != nil {
				p.completeTerminatingRuntimePod(uid)
				return
			}
			p.completeTerminating(uid)
			phaseTransition = true
		case isTerminal:
			p.completeSync(uid)
			phaseTransition = true
		}
		p.completeWork(uid, phaseTransition, err)
	}
}

// completeSync moves a pod that reached a terminal phase to terminating.
func (p *PodWorkers) completeSync(uid types.UID) {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, ok := p.podSyncStatuses[uid]
	if !ok {
		return
	}
	if status.terminatingAt.IsZero() {
		status.terminatingAt = time.Now()
	}
	p.requeueLastPodUpdate(uid, status)
}

// completeTerminating moves a pod whose containers have all stopped to
// terminated.
func (p *PodWorkers) completeTerminating(uid types.UID) {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, ok := p.podSyncStatuses[uid]
	if !ok {
		return
	}
	status.terminatedAt = time.Now()
	for _, ch := range status.notifyPostTerminating {
		close(ch)
	}
	status.notifyPostTerminating = nil
	p.requeueLastPodUpdate(uid, status)
}

// completeTerminatingRuntimePod forgets a runtime-only pod once stopped: it
// was never part of the desired state.
func (p *PodWorkers) completeTerminatingRuntimePod(uid types.UID) {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, ok := p.podSyncStatuses[uid]
	if !ok {
		return
	}
	for _, ch := range status.notifyPostTerminating {
		close(ch)
	}
	if status.cancelFn != nil {
		status.cancelFn()
	}
	delete(p.podSyncStatuses, uid)
	p.cleanupPodUpdates(uid)
}

// completeTerminated marks the worker finished; its goroutine exits.
func (p *PodWorkers) completeTerminated(uid types.UID) {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	p.cleanupPodUpdates(uid)
	status, ok := p.podSyncStatuses[uid]
	if !ok {
		return
	}
	if status.terminatingAt.IsZero() {
		status.terminatingAt = time.Now()
	}
	if status.terminatedAt.IsZero() {
		status.terminatedAt = time.Now()
	}
	status.finished = true
	status.working = false
	status.pendingUpdate = nil
	if status.cancelFn != nil {
		status.cancelFn()
	}
}

// completeWork requeues the pod (at once after a phase change, after the
// resync interval after success, after the backoff period after an error)
// and signals the worker again if an update is pending.
func (p *PodWorkers) completeWork(uid types.UID, phaseTransition bool, syncErr error) {
	switch {
	case phaseTransition:
		p.workQueue.Enqueue(uid, 0)
	case syncErr == nil:
		p.workQueue.Enqueue(uid, jitter(p.resyncInterval, workerResyncIntervalJitterFactor))
	default:
		p.workQueue.Enqueue(uid, jitter(p.backOffPeriod, workerBackOffPeriodJitterFactor))
	}
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, ok := p.podSyncStatuses[uid]
	if !ok {
		return
	}
	if status.pendingUpdate != nil {
		select {
		case p.podUpdates[uid] <- struct{}{}:
		default:
		}
	} else {
		status.working = false
	}
}

// requeueLastPodUpdate replays the active update so the worker moves on to
// its next phase without waiting for an outside event. Callers hold
// podLock.
func (p *PodWorkers) requeueLastPodUpdate(uid types.UID, status *podSyncStatus) {
	if status.pendingUpdate != nil || status.activeUpdate == nil {
		return
	}
	copied := *status.activeUpdate
	status.pendingUpdate = &copied
	status.working = true
	select {
	case p.podUpdates[uid] <- struct{}{}:
	default:
	}
}

// cleanupPodUpdates closes and forgets the update channel of uid, which ends
// its worker. Callers hold podLock.
func (p *PodWorkers) cleanupPodUpdates(uid types.UID) {
	if ch, ok := p.podUpdates[uid]; ok {
		close(ch)
		delete(p.podUpdates, uid)
	}
}

// SyncKnownPods reconciles the workers with the desired pods (the pods the
// kubelet should run): workers of pods no longer desired are told to
// terminate, and forgotten once finished. It returns the state of every
// remaining worker. The first call also marks the workers as synced: from
// then on a UID without a worker is a pod nobody wants. Mirrors
// podWorkers.SyncKnownPods.
func (p *PodWorkers) SyncKnownPods(desiredPods []*v1.Pod) map[types.UID]PodWorkerSync {
	known := make(map[types.UID]bool, len(desiredPods))
	for _, pod := range desiredPods {
		known[pod.UID] = true
	}
	p.podLock.Lock()
	defer p.podLock.Unlock()
	p.podsSynced = true
	workers := map[types.UID]PodWorkerSync{}
	for uid, status := range p.podSyncStatuses {
		orphan := !known[uid]
		if orphan && p.removeTerminatedWorker(uid, status) {
			continue
		}
		s := PodWorkerSync{State: status.WorkType(), Orphan: orphan}
		if status.activeUpdate != nil && status.activeUpdate.Pod != nil {
			s.HasConfig = true
		} else if status.pendingUpdate != nil && status.pendingUpdate.Pod != nil {
			s.HasConfig = true
		}
		workers[uid] = s
	}
	return workers
}

// removeTerminatedWorker forgets an orphaned worker if it is finished (or
// never started) and returns true; otherwise it drives the worker towards
// termination and returns false. Callers hold podLock.
func (p *PodWorkers) removeTerminatedWorker(uid types.UID, status *podSyncStatus) bool {
	if !status.finished {
		status.deleted = true
		switch {
		case !status.IsStarted() && !status.observedRuntime:
			// Never started: nothing to stop, just drop it.
		case !status.IsTerminationRequested():
			status.terminatingAt = time.Now()
			if status.activeUpdate != nil && status.activeUpdate.Pod != nil {
				status.gracePeriod, _ = calculateEffectiveGracePeriod(status, status.activeUpdate.Pod, nil)
			} else {
				status.gracePeriod = 1
			}
			p.requeueLastPodUpdate(uid, status)
			return false
		default:
			// Already terminating: make sure a worker that stopped after
			// an error tries again.
			p.requeueLastPodUpdate(uid, status)
			return false
		}
	}
	delete(p.podSyncStatuses, uid)
	p.cleanupPodUpdates(uid)
	return true
}

// IsPodKnownTerminated reports whether the worker of uid has stopped every
// container.
func (p *PodWorkers) IsPodKnownTerminated(uid types.UID) bool {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	s, ok := p.podSyncStatuses[uid]
	return ok && s.IsTerminated()
}

// IsPodTerminationRequested reports whether the pod is terminating or
// terminated.
func (p *PodWorkers) IsPodTerminationRequested(uid types.UID) bool {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	s, ok := p.podSyncStatuses[uid]
	return ok && s.IsTerminationRequested()
}

// CouldHaveRunningContainers reports whether containers of uid might still
// run: true until the worker has terminated the pod, and for unknown pods
// until the first SyncKnownPods. The status manager holds back a terminal
// phase while this is true.
func (p *PodWorkers) CouldHaveRunningContainers(uid types.UID) bool {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	if s, ok := p.podSyncStatuses[uid]; ok {
		return !s.IsTerminated()
	}
	return !p.podsSynced
}

// ShouldPodContentBeRemoved reports whether everything of uid may be
// deleted: it was deleted (or orphaned) and has terminated, or the kubelet
// has no worker for it after the first SyncKnownPods.
func (p *PodWorkers) ShouldPodContentBeRemoved(uid types.UID) bool {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	if s, ok := p.podSyncStatuses[uid]; ok {
		return s.deleted && s.IsTerminated()
	}
	return p.podsSynced
}

// ShouldPodRuntimeBeRemoved reports whether the runtime's containers of uid
// may be removed: the pod has terminated, or is unknown after the first
// SyncKnownPods.
func (p *PodWorkers) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	if s, ok := p.podSyncStatuses[uid]; ok {
		return s.IsTerminated()
	}
	return p.podsSynced
}

// jitter returns d plus up to factor·d at random.
func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(rand.Float64()*factor*float64(d))
}
