// Package prober runs the containers' liveness, readiness and startup probes
// (exec through CRI ExecSync, httpGet, tcpSocket and grpc.health.v1), one
// worker per pod, container and probe type, and keeps their results in three
// results managers whose update channels feed the kubelet's
// syncLoopIteration. It also says, from those results, whether each container
// is started and ready (UpdatePodStatus). Mirrors kubelet's pkg/kubelet/prober
// and the probe kinds of pkg/probe.
package prober

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/prober/httpget"
	"skiff.dev/services/kubelet/prober/results"
)

// StatusProvider gives the pod status the kubelet last computed (the status
// manager's cache): probes find their container and the pod IP there.
type StatusProvider interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// Options configures a Manager.
type Options struct {
	// StatusProvider is the kubelet's status manager; required.
	StatusProvider StatusProvider
	// LivenessManager, ReadinessManager and StartupManager receive the
	// results; required (the kubelet and kuberuntime read them too).
	LivenessManager, ReadinessManager, StartupManager *results.Manager
	// Runner runs exec probes (CRI ExecSync); required.
	Runner container.CommandRunner
	// Recorder reports Unhealthy and ProbeWarning events; nil records none.
	Recorder record.EventRecorder
	// KubeletVersion, e.g. "v1.32.4", makes the probes' User-Agent
	// "kube-probe/1.32".
	KubeletVersion string
	// Clock measures initialDelaySeconds; nil means the real clock.
	Clock clock.Clock
}

// probeKey identifies a worker.
type probeKey struct {
	podUID        types.UID
	containerName string
	probeType     probeType
}

// Manager starts and stops the probe workers of the pods the kubelet runs.
// Safe for concurrent use. Mirrors prober.Manager.
type Manager struct {
	statusProvider   StatusProvider
	livenessManager  *results.Manager
	readinessManager *results.Manager
	startupManager   *results.Manager
	prober           *prober
	clock            clock.Clock

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.RWMutex
	workers map[probeKey]*worker
}

// NewManager returns a Manager; workers start with AddPod and all end when
// Run returns.
func NewManager(opts Options) *Manager {
	recorder := opts.Recorder
	if recorder == nil {
		recorder = eventrecorder.Nop{}
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		statusProvider:   opts.StatusProvider,
		livenessManager:  opts.LivenessManager,
		readinessManager: opts.ReadinessManager,
		startupManager:   opts.StartupManager,
		prober: &prober{
			runner:    opts.Runner,
			http:      newProbeHTTPClient(),
			recorder:  recorder,
			userAgent: httpget.UserAgent("kube-probe", opts.KubeletVersion),
		},
		clock:   clk,
		ctx:     ctx,
		cancel:  cancel,
		workers: map[probeKey]*worker{},
	}
}

// Run waits until ctx ends, then stops every worker and waits for them,
// draining the results' channels so that no worker stays blocked on a sync
// loop that has gone.
func (m *Manager) Run(ctx context.Context) {
	<-ctx.Done()
	m.cancel()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			return
		case <-m.livenessManager.Updates():
		case <-m.readinessManager.Updates():
		case <-m.startupManager.Updates():
		}
	}
}

// AddPod starts a worker for every probe of pod's containers that has none.
// Mirrors manager.AddPod.
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	for _, c := range pod.Spec.Containers {
		for t, p := range map[probeType]*v1.Probe{startup: c.StartupProbe, readiness: c.ReadinessProbe, liveness: c.LivenessProbe} {
			if p == nil {
				continue
			}
			key := probeKey{podUID: pod.UID, containerName: c.Name, probeType: t}
			if _, ok := m.workers[key]; ok {
				continue
			}
			w := newWorker(m, t, pod, c)
			m.workers[key] = w
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				w.run(m.ctx)
			}()
		}
	}
}

// StopLivenessAndStartup stops pod's liveness and startup workers: a pod
// being terminated is not restarted for them. Readiness keeps running, so a
// terminating pod leaves its Services' endpoints. Mirrors
// manager.StopLivenessAndStartup.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, c := range pod.Spec.Containers {
		for _, t := range []probeType{liveness, startup} {
			if w, ok := m.workers[probeKey{pod.UID, c.Name, t}]; ok {
				w.stop()
			}
		}
	}
}

// RemovePod stops every worker of pod. Mirrors manager.RemovePod.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for key, w := range m.workers {
		if key.podUID == pod.UID {
			w.stop()
		}
	}
}

// CleanupPods stops the workers of pods not in desired. Mirrors
// manager.CleanupPods.
func (m *Manager) CleanupPods(desired map[types.UID]bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for key, w := range m.workers {
		if !desired[key.podUID] {
			w.stop()
		}
	}
}

func (m *Manager) removeWorker(uid types.UID, name string, t probeType) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.workers, probeKey{uid, name, t})
}

func (m *Manager) getWorker(uid types.UID, name string, t probeType) (*worker, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w, ok := m.workers[probeKey{uid, name, t}]
	return w, ok
}

// UpdatePodStatus sets each container's started and ready in podStatus from
// the probes: a running container is started once its startup probe
// succeeded (at once without one), and ready once started and its readiness
// probe succeeded (at once without one: a readiness probe that has not run
// yet is asked to run now). An init container is ready once it succeeded.
// Mirrors manager.UpdatePodStatus.
func (m *Manager) UpdatePodStatus(pod *v1.Pod, podStatus *v1.PodStatus) {
	for i := range podStatus.ContainerStatuses {
		c := &podStatus.ContainerStatuses[i]
		id := container.ParseContainerID(c.ContainerID)
		started := false
		switch {
		case c.State.Running == nil:
		default:
			if r, ok := m.startupManager.Get(id); ok {
				started = r == results.Success
			} else {
				_, probed := m.getWorker(pod.UID, c.Name, startup)
				started = !probed
			}
		}
		c.Started = &started
		if !started {
			c.Ready = false
			continue
		}
		if r, ok := m.readinessManager.Get(id); ok && r == results.Success {
			c.Ready = true
			continue
		}
		w, probed := m.getWorker(pod.UID, c.Name, readiness)
		c.Ready = !probed
		if probed {
			select {
			case w.manualTriggerCh <- struct{}{}:
			default:
			}
		}
	}
	for i := range podStatus.InitContainerStatuses {
		c := &podStatus.InitContainerStatuses[i]
		running := c.State.Running != nil
		c.Started = &running
		c.Ready = c.State.Terminated != nil && c.State.Terminated.ExitCode == 0
	}
}
