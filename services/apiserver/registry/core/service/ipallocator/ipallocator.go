// Package ipallocator allocates Service ClusterIPs from --service-cluster-ip-range over
// a bitmap in etcd (/registry/ranges/serviceips). Mirrors
// k8s.io/kubernetes/pkg/registry/core/service/ipallocator: the network address and, for
// IPv4, the broadcast address are never handed out, and dynamic allocations prefer the
// upper part of the range so that low, well-known addresses (10.96.0.10 for DNS) stay
// free for explicit requests.
package ipallocator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"

	netutils "k8s.io/utils/net"

	"skiff.dev/services/apiserver/registry/core/service/allocator"
	"skiff.dev/services/apiserver/storage"
)

// Key is where the service IP bitmap lives in etcd (kube's key).
const Key = "/registry/ranges/serviceips"

var (
	// ErrFull is kube's message when no IP is free.
	ErrFull = errors.New("range is full")
	// ErrAllocated is kube's message for a requested IP that is taken.
	ErrAllocated = errors.New("provided IP is already allocated")
)

// ErrNotInRange is returned for an IP outside the range, with kube's message.
type ErrNotInRange struct {
	IP         net.IP
	ValidRange string
}

func (e *ErrNotInRange) Error() string {
	return fmt.Sprintf("the provided IP (%v) is not in the valid range. The range of valid IPs is %s", e.IP, e.ValidRange)
}

// Range allocates IPs of one CIDR.
type Range struct {
	net   *net.IPNet
	base  *big.Int // the first allocatable address (network + 1)
	max   int      // how many addresses are allocatable
	alloc *allocator.Etcd
}

// New is the allocator of cidr over the RangeAllocation at Key in store (an etcd3 store
// of corev1.RangeAllocation). Errors: a range too small to hold one address.
func New(cidr *net.IPNet, store storage.Interface) (*Range, error) {
	size := netutils.RangeSize(cidr)
	if netutils.IsIPv6CIDR(cidr) {
		size = min(size, 65536) // the bitmap's size, as kube limits it
	} else {
		size-- // never the broadcast address
	}
	size-- // never the network address
	if size < 1 {
		return nil, fmt.Errorf("service IP range %s holds no allocatable address", cidr)
	}
	r := &Range{net: cidr, base: new(big.Int).Add(netutils.BigForIP(cidr.IP), big.NewInt(1)), max: int(size)}
	r.alloc = &allocator.Etcd{Key: Key, Range: cidr.String(), Max: r.max, Offset: dynamicOffset(r.max), Storage: store}
	return r, nil
}

// dynamicOffset is where dynamic allocations start: min(max(16, size/16), 256) (kube's
// calculateRangeOffset), below which addresses stay for explicit requests.
func dynamicOffset(size int) int {
	const lo, hi, step = 16, 256, 16
	if size < lo {
		return 0
	}
	return min(max(lo, size/step), hi)
}

// CIDR is the range.
func (r *Range) CIDR() *net.IPNet { return r.net }

// Size is how many addresses are allocatable in all.
func (r *Range) Size() int { return r.max }

// Contains reports whether ip is allocatable in the range.
func (r *Range) Contains(ip net.IP) bool {
	_, ok := r.offset(ip)
	return ok
}

func (r *Range) offset(ip net.IP) (int, bool) {
	if !r.net.Contains(ip) {
		return 0, false
	}
	o := new(big.Int).Sub(netutils.BigForIP(ip), r.base)
	if o.Sign() < 0 || !o.IsInt64() || o.Int64() >= int64(r.max) {
		return 0, false
	}
	return int(o.Int64()), true
}

func (r *Range) ipAt(offset int) net.IP {
	return netutils.AddIPOffset(r.base, offset)
}

// Allocate takes ip. Errors: *ErrNotInRange, ErrAllocated, storage errors.
func (r *Range) Allocate(ctx context.Context, ip net.IP) error {
	o, ok := r.offset(ip)
	if !ok {
		return &ErrNotInRange{IP: ip, ValidRange: r.net.String()}
	}
	if err := r.alloc.Allocate(ctx, o); err != nil {
		if errors.Is(err, allocator.ErrAllocated) {
			return ErrAllocated
		}
		return err
	}
	return nil
}

// AllocateNext takes a free IP. Errors: ErrFull, storage errors.
func (r *Range) AllocateNext(ctx context.Context) (net.IP, error) {
	o, err := r.alloc.AllocateNext(ctx)
	if err != nil {
		if errors.Is(err, allocator.ErrFull) {
			return nil, ErrFull
		}
		return nil, err
	}
	return r.ipAt(o), nil
}

// Release frees ip; an IP outside the range or not taken is a no-op.
func (r *Range) Release(ctx context.Context, ip net.IP) error {
	o, ok := r.offset(ip)
	if !ok {
		return nil
	}
	return r.alloc.Release(ctx, o)
}

// Has reports whether ip is taken.
func (r *Range) Has(ctx context.Context, ip net.IP) (bool, error) {
	o, ok := r.offset(ip)
	if !ok {
		return false, nil
	}
	return r.alloc.Has(ctx, o)
}

// Mark records ips as taken without failing on those already taken or outside the
// range (the repair at start: every existing Service's IPs are in the bitmap).
func (r *Range) Mark(ctx context.Context, ips []net.IP) error {
	var offsets []int
	for _, ip := range ips {
		if o, ok := r.offset(ip); ok {
			offsets = append(offsets, o)
		}
	}
	return r.alloc.Mark(ctx, offsets)
}
