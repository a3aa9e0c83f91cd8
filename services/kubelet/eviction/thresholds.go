// Package eviction watches the node's resources against the hard eviction
// thresholds (--eviction-hard) and says whether the node is under memory,
// disk or PID pressure, for the node's MemoryPressure, DiskPressure and
// PIDPressure conditions. It does not evict pods. Mirrors the signals,
// thresholds and pressure checks of k8s.io/kubernetes pkg/kubelet/eviction.
package eviction

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is a resource the kubelet observes. Mirrors evictionapi.Signal.
type Signal string

// The signals, kube's names.
const (
	// SignalMemoryAvailable is MemAvailable of /proc/meminfo.
	SignalMemoryAvailable Signal = "memory.available"
	// SignalNodeFsAvailable is the free space of the kubelet root dir's filesystem.
	SignalNodeFsAvailable Signal = "nodefs.available"
	// SignalNodeFsInodesFree is its free inodes.
	SignalNodeFsInodesFree Signal = "nodefs.inodesFree"
	// SignalImageFsAvailable is the free space of the image filesystem,
	// measured on the kubelet root dir's filesystem (no dedicated imagefs).
	SignalImageFsAvailable Signal = "imagefs.available"
	// SignalImageFsInodesFree is its free inodes.
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	// SignalPIDAvailable is the process ids left: the pid limit less the
	// processes that exist.
	SignalPIDAvailable Signal = "pid.available"
)

var signals = []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable}

// DefaultEvictionHard is kube's default --eviction-hard (Linux).
const DefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%"

// Threshold is "signal < value": an absolute Quantity, or a Percentage
// (0..1) of the signal's capacity. Mirrors evictionapi.Threshold (hard
// thresholds only: operator LessThan, no grace period).
type Threshold struct {
	Signal     Signal
	Quantity   *resource.Quantity
	Percentage float64
}

// String renders the threshold as the flag takes it.
func (t Threshold) String() string {
	if t.Quantity != nil {
		return string(t.Signal) + "<" + t.Quantity.String()
	}
	return string(t.Signal) + "<" + strconv.FormatFloat(t.Percentage*100, 'f', -1, 64) + "%"
}

// ParseThresholds parses --eviction-hard: comma-separated signal<value
// entries, value a quantity ("100Mi", "1000") or a percentage ("10%").
// Unknown signals, other operators, negative values, percentages above
// 100% and a signal given twice are errors. "" means no thresholds (an
// empty, non-nil slice).
// Mirrors eviction.ParseThresholdConfig.
func ParseThresholds(s string) ([]Threshold, error) {
	out := []Threshold{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		name, value, ok := strings.Cut(entry, "<")
		if !ok {
			return nil, fmt.Errorf("eviction threshold %q: want signal<value", entry)
		}
		sig := Signal(strings.TrimSpace(name))
		if !slices.Contains(signals, sig) {
			return nil, fmt.Errorf("eviction threshold %q: unsupported signal %q", entry, sig)
		}
		if slices.ContainsFunc(out, func(t Threshold) bool { return t.Signal == sig }) {
			return nil, fmt.Errorf("eviction threshold %q: signal %s given twice", entry, sig)
		}
		t := Threshold{Signal: sig}
		value = strings.TrimSpace(value)
		if p, ok := strings.CutSuffix(value, "%"); ok {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || f < 0 || f > 100 {
				return nil, fmt.Errorf("eviction threshold %q: invalid percentage %q", entry, value)
			}
			t.Percentage = f / 100
		} else {
			q, err := resource.ParseQuantity(value)
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("eviction threshold %q: invalid quantity %q", entry, value)
			}
			t.Quantity = &q
		}
		out = append(out, t)
	}
	return out, nil
}

// crossed reports whether an observation is below the threshold.
func (t Threshold) crossed(o Observation) bool {
	limit := int64(t.Percentage * float64(o.Capacity))
	if t.Quantity != nil {
		limit = t.Quantity.Value()
	}
	return o.Available < limit
}
