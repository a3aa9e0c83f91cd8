// Package sim is skiff's built-in CRI runtime of simulated containers, like
// Kubernetes' hollow node: no processes run, so one machine can hold many
// pods for scale tests and demos, and pod annotations (see
// AnnotationStartDelay, AnnotationRunTime, AnnotationExitCode) script how
// each container behaves.
//
// A container is RUNNING from StartContainer until it is stopped (exit code
// 0) or its run time ends (AnnotationExitCode). Its log file gets the lines
// "sim: started <image>" and "sim: exited <code>" in CRI log format, so
// `kubectl logs` works. Each sandbox gets a fake pod IP from PodCIDR, released
// when the sandbox is stopped or removed (the status keeps reporting it, as
// containerd's does); a host-network sandbox gets none, as in containerd, and
// the kubelet uses the node's IP. ExecSync is Unimplemented.
//
// CRI Exec runs the command as a HOST process (in the system's temporary
// directory, with the container's environment variables), since a simulated
// container has nothing to run it in; Attach streams the container's log
// lines from the moment of attaching; PortForward connects to the port on the
// host's loopback.
package sim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/cri/criolog"
	"skiff.dev/services/cri/criservice"
)

// RuntimeName is what Version reports as the runtime name.
const RuntimeName = "skiff-sim"

// Runtime is the sim CRI runtime. It implements
// runtimeapi.RuntimeServiceServer and runtimeapi.ImageServiceServer through
// the embedded criservice.Service; serve it with runtime.Serve.
type Runtime struct {
	*criservice.Service
}

// New returns an empty sim Runtime. Its stream URLs are served on a loopback
// port (StreamingAddr); if none can be listened on, Exec, Attach and
// PortForward answer Unimplemented and everything else works.
//
// Its pod network is not ready (Status: NetworkReady false, reason
// NetworkPluginNotReady) until the kubelet hands it a pod CIDR (CRI
// UpdateRuntimeConfig: the node's spec.podCIDR, or the kubelet's --pod-cidr), as
// kubenet's is not and a CNI host-local range's: pods get IPs from their own node's
// range, never one another's. Until then a sandbox still gets an IP from PodCIDR, for
// CRI clients other than the kubelet, which waits.
func New() *Runtime {
	d := newDriver()
	d.needPodCIDR = true
	svc := criservice.New(RuntimeName, d)
	_ = svc.StartStreaming(StreamingAddr)
	return &Runtime{Service: svc}
}

// Close stops every simulated container (exit code 0), cancels pending
// start delays and run-time timers, and waits for the timers' goroutines.
// Close is idempotent.
func (r *Runtime) Close() { r.Service.Close() }

// stoppedExitCode is the exit code of a stopped simulated container.
const stoppedExitCode = 0

// driver simulates containers with timers; it is the criservice.Driver of Runtime.
type driver struct {
	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close, ends start delays
	pool    *ipPool
	ips     map[string]netip.Addr // by sandbox ID
	ctrs    map[string]*simContainer
	timers  sync.WaitGroup // run-time callbacks scheduled and not yet finished

	// needPodCIDR: the network is not ready until SetPodCIDR (New; a hollow node's
	// is ready at once, as kubemark's); hasPodCIDR: SetPodCIDR has been called.
	needPodCIDR, hasPodCIDR bool
}

type simContainer struct {
	id       string
	exitCode int32       // when the run time ends
	timer    *time.Timer // nil: runs until stopped
	finished bool
	log      *criolog.File
	exited   func(criservice.ExitStatus)
	done     chan struct{} // closed once the exit has been reported
}

func newDriver() *driver {
	return &driver{
		closing: make(chan struct{}),
		pool:    newIPPool(),
		ips:     map[string]netip.Addr{},
		ctrs:    map[string]*simContainer{},
	}
}

// RunSandbox allocates a pod IP from PodCIDR, except for a host-network sandbox.
func (d *driver) RunSandbox(id string, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return "", nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ip, err := d.pool.allocate()
	if err != nil {
		return "", status.Error(codes.ResourceExhausted, err.Error())
	}
	d.ips[id] = ip
	return ip.String(), nil
}

// SetPodCIDR makes cidr (the node's spec.podCIDR, from CRI
// UpdateRuntimeConfig; the first range of a comma-separated list) the pool
// new pod IPs come from, so pods of different nodes never share an IP.
// Addresses in use stay reserved. Errors: not an IPv4 range of at least /30.
func (d *driver) SetPodCIDR(cidr string) error {
	if i := strings.IndexByte(cidr, ','); i >= 0 {
		cidr = cidr[:i]
	}
	pool, err := newIPPoolFor(cidr)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hasPodCIDR = true
	if pool.prefix == d.pool.prefix {
		return nil
	}
	for _, ip := range d.ips {
		if pool.prefix.Contains(ip) {
			pool.used[ip] = true
		}
	}
	d.pool = pool
	return nil
}

// NetworkCondition is NetworkReady: false with reason NetworkPluginNotReady while a
// runtime from New has no pod CIDR yet, else true.
func (d *driver) NetworkCondition() *runtimeapi.RuntimeCondition {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.needPodCIDR && !d.hasPodCIDR {
		return &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady",
			Message: "no pod CIDR yet: the kubelet hands over its node's spec.podCIDR (node IPAM) or its --pod-cidr"}
	}
	return &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
}

// StopSandbox releases the sandbox's pod IP.
func (d *driver) StopSandbox(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ip, ok := d.ips[id]; ok {
		d.pool.release(ip)
		delete(d.ips, id)
	}
}

// RemoveSandbox releases the sandbox's pod IP if StopSandbox has not.
func (d *driver) RemoveSandbox(id string) error {
	d.StopSandbox(id)
	return nil
}

// ValidateContainer refuses invalid sim annotations.
func (d *driver) ValidateContainer(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) error {
	_, err := behaviorOf(sandbox, cfg)
	return err
}

// StartContainer waits out the start delay, logs the start and arms the
// run-time timer.
func (d *driver) StartContainer(ctx context.Context, c *criservice.ContainerSpec, log *criolog.File, exited func(criservice.ExitStatus)) (time.Time, error) {
	b, err := behaviorOf(c.Sandbox, c.Config)
	if err != nil {
		return time.Time{}, err
	}
	if b.startDelay > 0 {
		delay := time.NewTimer(b.startDelay)
		select {
		case <-delay.C:
		case <-ctx.Done():
			delay.Stop()
			return time.Time{}, ctx.Err()
		case <-d.closing:
			delay.Stop()
			return time.Time{}, status.Error(codes.Unavailable, "runtime is shut down")
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return time.Time{}, status.Error(codes.Unavailable, "runtime is shut down")
	}
	sc := &simContainer{id: c.ID, exitCode: b.exitCode, log: log, exited: exited, done: make(chan struct{})}
	d.ctrs[c.ID] = sc
	startedAt := time.Now()
	_ = log.WriteString(criolog.Stdout, "sim: started "+c.Image)
	if b.runTime > 0 {
		d.timers.Add(1)
		sc.timer = time.AfterFunc(b.runTime, func() {
			defer d.timers.Done()
			d.finish(sc, sc.exitCode)
		})
	}
	return startedAt, nil
}

// finish ends sc with exit code code, once: it cancels its timer, logs the
// exit and reports it.
func (d *driver) finish(sc *simContainer, code int32) {
	d.mu.Lock()
	if sc.finished {
		d.mu.Unlock()
		return
	}
	sc.finished = true
	if sc.timer != nil && sc.timer.Stop() {
		d.timers.Done() // its callback will never run
	}
	d.mu.Unlock()

	finishedAt := time.Now()
	_ = sc.log.WriteString(criolog.Stdout, fmt.Sprintf("sim: exited %d", code))
	sc.exited(criservice.ExitStatus{ExitCode: code, FinishedAt: finishedAt})
	close(sc.done)

	d.mu.Lock()
	delete(d.ctrs, sc.id)
	d.mu.Unlock()
}

// StopContainer ends the container at once with exit code 0, whatever the
// timeout: a simulated program handles SIGTERM promptly.
func (d *driver) StopContainer(ctx context.Context, id string, _ time.Duration) error {
	d.mu.Lock()
	sc := d.ctrs[id]
	d.mu.Unlock()
	if sc == nil {
		return nil
	}
	d.finish(sc, stoppedExitCode)
	select {
	case <-sc.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends start delays and every container (exit code 0) and waits for
// run-time callbacks already running.
func (d *driver) Close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.closing)
	}
	ctrs := make([]*simContainer, 0, len(d.ctrs))
	for _, sc := range d.ctrs {
		ctrs = append(ctrs, sc)
	}
	d.mu.Unlock()
	for _, sc := range ctrs {
		d.finish(sc, stoppedExitCode)
	}
	d.timers.Wait()
}
