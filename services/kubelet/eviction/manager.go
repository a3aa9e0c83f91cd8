package eviction

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// DefaultPressureTransitionPeriod is how long a pressure condition stays
// true after the last observation below a threshold (kube's
// --eviction-pressure-transition-period), so it does not flap.
const DefaultPressureTransitionPeriod = 5 * time.Minute

// Observation is one signal's value: what is available of its capacity, in
// bytes, inodes or process ids.
type Observation struct {
	Available, Capacity int64
}

// Observations are the signals' values at one moment.
type Observations map[Signal]Observation

// Manager answers whether the node is under pressure. Safe for concurrent
// use. Mirrors eviction.managerImpl's IsUnder*Pressure.
type Manager struct {
	thresholds       []Threshold
	observe          func() (Observations, error)
	clock            clock.WithTicker
	transitionPeriod time.Duration

	mu           sync.Mutex
	lastObserved map[Signal]time.Time // last time each signal was below its threshold
}

// NewManager returns a Manager checking thresholds against the machine:
// /proc/meminfo, statfs of rootDir (the kubelet's root dir) and the pid
// limit.
func NewManager(thresholds []Threshold, rootDir string) *Manager {
	return newManager(thresholds, func() (Observations, error) { return Observe(rootDir) }, clock.RealClock{})
}

func newManager(thresholds []Threshold, observe func() (Observations, error), c clock.WithTicker) *Manager {
	return &Manager{thresholds: thresholds, observe: observe, clock: c,
		transitionPeriod: DefaultPressureTransitionPeriod, lastObserved: map[Signal]time.Time{}}
}

// Thresholds returns the thresholds the manager checks.
func (m *Manager) Thresholds() []Threshold { return m.thresholds }

// Synchronize observes the machine once and records which thresholds are
// crossed; call it before reading the pressure conditions (the node status
// loop does, every update). Mirrors managerImpl.synchronize without the
// eviction.
func (m *Manager) Synchronize() error {
	obs, err := m.observe()
	if err != nil {
		return err
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.thresholds {
		if o, ok := obs[t.Signal]; ok && t.crossed(o) {
			m.lastObserved[t.Signal] = now
		}
	}
	return nil
}

// IsUnderMemoryPressure reports whether memory.available was below its
// threshold within the transition period.
func (m *Manager) IsUnderMemoryPressure() bool {
	return m.underPressure(SignalMemoryAvailable)
}

// IsUnderDiskPressure reports whether a nodefs or imagefs signal was below
// its threshold within the transition period.
func (m *Manager) IsUnderDiskPressure() bool {
	return m.underPressure(SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree)
}

// IsUnderPIDPressure reports whether pid.available was below its threshold
// within the transition period.
func (m *Manager) IsUnderPIDPressure() bool {
	return m.underPressure(SignalPIDAvailable)
}

func (m *Manager) underPressure(sigs ...Signal) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for _, s := range sigs {
		if at, ok := m.lastObserved[s]; ok && now.Sub(at) < m.transitionPeriod {
			return true
		}
	}
	return false
}

// Observe reads every signal from the machine: memory from /proc/meminfo
// (MemAvailable of MemTotal), nodefs and imagefs from statfs(rootDir), pids
// from min(kernel.pid_max, kernel.threads-max) less the processes sysinfo
// counts.
func Observe(rootDir string) (Observations, error) {
	obs := Observations{}
	mem, err := readMeminfo()
	if err != nil {
		return nil, err
	}
	obs[SignalMemoryAvailable] = Observation{Available: mem["MemAvailable"], Capacity: mem["MemTotal"]}
	var st unix.Statfs_t
	if err := unix.Statfs(rootDir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", rootDir, err)
	}
	bytes := Observation{Available: int64(st.Bavail) * st.Bsize, Capacity: int64(st.Blocks) * st.Bsize}
	inodes := Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
	obs[SignalNodeFsAvailable], obs[SignalImageFsAvailable] = bytes, bytes
	obs[SignalNodeFsInodesFree], obs[SignalImageFsInodesFree] = inodes, inodes
	maxPID := readInt("/proc/sys/kernel/pid_max")
	if threads := readInt("/proc/sys/kernel/threads-max"); threads > 0 && (maxPID == 0 || threads < maxPID) {
		maxPID = threads
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil, fmt.Errorf("sysinfo: %w", err)
	}
	if maxPID > 0 {
		obs[SignalPIDAvailable] = Observation{Available: maxPID - int64(si.Procs), Capacity: maxPID}
	}
	return obs, nil
}

// readMeminfo returns /proc/meminfo's fields in bytes.
func readMeminfo() (map[string]int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) == 3 && fields[2] == "kB" {
			v *= 1024
		}
		out[strings.TrimSuffix(fields[0], ":")] = v
	}
	if _, ok := out["MemAvailable"]; !ok {
		return nil, fmt.Errorf("/proc/meminfo has no MemAvailable")
	}
	return out, s.Err()
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// monitoringInterval is how often Run observes the machine (kube's
// evictionMonitoringPeriod).
const monitoringInterval = 10 * time.Second

// Run calls Synchronize at once and every 10 s until ctx ends; an error is
// passed to onError (nil: dropped).
func (m *Manager) Run(ctx context.Context, onError func(error)) {
	t := m.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := m.Synchronize(); err != nil && onError != nil {
			onError(err)
		}
		t.Reset(monitoringInterval)
	}
}
