package prober

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/prober/results"
)

// worker runs one probe (liveness, readiness or startup) of one container of
// one pod every periodSeconds, applying initialDelaySeconds and the
// success and failure thresholds, and keeps the result in its results
// manager. It follows the container across restarts (a new container ID
// starts from the probe's initial value) and ends when the pod is terminal,
// when it is stopped, or when its pod is removed. Mirrors kubelet's prober
// worker.
type worker struct {
	stopCh chan struct{}
	// manualTriggerCh asks for a probe now (capacity 1), e.g. a readiness
	// probe that has not run yet for a just-started container.
	manualTriggerCh chan struct{}

	pod       *v1.Pod
	container v1.Container
	spec      *v1.Probe
	probeType probeType
	// initialValue is the result before the probe has decided: Failure for
	// readiness (not ready until proven), Success for liveness (alive until
	// proven otherwise), Unknown for startup.
	initialValue   results.Result
	resultsManager *results.Manager
	probeManager   *Manager

	containerID container.ContainerID
	lastResult  results.Result
	// resultRun counts consecutive lastResults, against the thresholds.
	resultRun int
	// onHold stops probing a container that failed liveness or startup
	// until it is replaced: it is being killed.
	onHold bool
}

func newWorker(m *Manager, t probeType, pod *v1.Pod, c v1.Container) *worker {
	w := &worker{
		stopCh:          make(chan struct{}, 1),
		manualTriggerCh: make(chan struct{}, 1),
		pod:             pod,
		container:       c,
		probeType:       t,
		probeManager:    m,
		lastResult:      results.Unknown,
	}
	switch t {
	case readiness:
		w.spec = c.ReadinessProbe
		w.resultsManager = m.readinessManager
		w.initialValue = results.Failure
	case liveness:
		w.spec = c.LivenessProbe
		w.resultsManager = m.livenessManager
		w.initialValue = results.Success
	case startup:
		w.spec = c.StartupProbe
		w.resultsManager = m.startupManager
		w.initialValue = results.Unknown
	}
	return w
}

// run probes until doProbe says to stop, the worker is stopped, or ctx ends;
// then it forgets its result and unregisters.
func (w *worker) run(ctx context.Context) {
	period := time.Duration(max(w.spec.PeriodSeconds, 1)) * time.Second
	ticker := time.NewTicker(period)
	defer func() {
		ticker.Stop()
		if !w.containerID.IsEmpty() {
			w.resultsManager.Remove(w.containerID)
		}
		w.probeManager.removeWorker(w.pod.UID, w.container.Name, w.probeType)
	}()
	for w.doProbe(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-w.stopCh:
			return
		case <-ticker.C:
		case <-w.manualTriggerCh:
		}
	}
}

// stop ends the worker; it may be called more than once.
func (w *worker) stop() {
	select {
	case w.stopCh <- struct{}{}:
	default:
	}
}

// doProbe probes once if it is time to, records the result when a threshold
// is reached, and returns whether the worker should keep going. Mirrors
// worker.doProbe.
func (w *worker) doProbe(ctx context.Context) (keepGoing bool) {
	status, ok := w.probeManager.statusProvider.GetPodStatus(w.pod.UID)
	if !ok {
		// Not synced yet, or already gone.
		return true
	}
	if status.Phase == v1.PodFailed || status.Phase == v1.PodSucceeded {
		return false
	}
	c, ok := findContainerStatus(status.ContainerStatuses, w.container.Name)
	if !ok || c.ContainerID == "" {
		// Not created yet, or removed.
		return true
	}

	if w.containerID.String() != c.ContainerID {
		if !w.containerID.IsEmpty() {
			w.resultsManager.Remove(w.containerID)
		}
		w.containerID = container.ParseContainerID(c.ContainerID)
		w.resultsManager.Set(w.containerID, w.initialValue, w.pod)
		w.onHold = false
		w.lastResult, w.resultRun = results.Unknown, 0
	}
	if w.onHold {
		return true
	}

	if c.State.Running == nil {
		if !w.containerID.IsEmpty() {
			w.resultsManager.Set(w.containerID, results.Failure, w.pod)
		}
		// A container that will not be restarted needs no more probing.
		return c.State.Terminated == nil || w.pod.Spec.RestartPolicy != v1.RestartPolicyNever
	}

	if w.pod.DeletionTimestamp != nil && (w.probeType == liveness || w.probeType == startup) {
		// A pod shutting down is not restarted for failing liveness.
		w.resultsManager.Set(w.containerID, results.Success, w.pod)
		return false
	}

	if w.probeManager.clock.Since(c.State.Running.StartedAt.Time) < time.Duration(w.spec.InitialDelaySeconds)*time.Second {
		return true
	}

	if c.Started != nil && *c.Started {
		// The startup probe has done its job; it stays to watch a restarted
		// container.
		if w.probeType == startup {
			return true
		}
	} else if w.probeType != startup {
		// Liveness and readiness wait for startup.
		return true
	}

	result, err := w.probeManager.prober.probe(ctx, w.probeType, w.pod, status, &w.container, w.containerID)
	if err != nil {
		// The probe could not run: its result says nothing.
		return true
	}
	if w.lastResult == result {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = result, 1
	}
	if (result == results.Failure && w.resultRun < int(max(w.spec.FailureThreshold, 1))) ||
		(result == results.Success && w.resultRun < int(max(w.spec.SuccessThreshold, 1))) {
		return true
	}
	w.resultsManager.Set(w.containerID, result, w.pod)

	if (w.probeType == liveness || w.probeType == startup) && result == results.Failure {
		// The container will be killed; probe its successor.
		w.onHold = true
		w.resultRun = 0
	}
	return true
}

func findContainerStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}
