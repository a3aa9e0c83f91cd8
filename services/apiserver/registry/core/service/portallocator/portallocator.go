// Package portallocator allocates Service NodePorts from --service-node-port-range over
// a bitmap in etcd (/registry/ranges/servicenodeports). Mirrors
// k8s.io/kubernetes/pkg/registry/core/service/portallocator.
package portallocator

import (
	"context"
	"errors"
	"fmt"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"skiff.dev/services/apiserver/registry/core/service/allocator"
	"skiff.dev/services/apiserver/storage"
)

// Key is where the node port bitmap lives in etcd (kube's key).
const Key = "/registry/ranges/servicenodeports"

var (
	// ErrFull is kube's message when no port is free.
	ErrFull = errors.New("range is full")
	// ErrAllocated is kube's message for a requested port that is taken.
	ErrAllocated = errors.New("provided port is already allocated")
)

// ErrNotInRange is returned for a port outside the range, with kube's message.
type ErrNotInRange struct {
	ValidPorts string
}

func (e *ErrNotInRange) Error() string {
	return fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", e.ValidPorts)
}

// PortAllocator allocates ports of one range.
type PortAllocator struct {
	pr    utilnet.PortRange
	alloc *allocator.Etcd
}

// New is the allocator of pr over the RangeAllocation at Key in store.
func New(pr utilnet.PortRange, store storage.Interface) (*PortAllocator, error) {
	if pr.Size < 1 {
		return nil, fmt.Errorf("node port range %q is empty", pr.String())
	}
	a := &PortAllocator{pr: pr}
	// kube's portallocator keeps the lower block for explicit requests too (offset
	// min(max(16, size/32), 128)).
	offset := 0
	if pr.Size >= 16 {
		offset = min(max(16, pr.Size/32), 128)
	}
	a.alloc = &allocator.Etcd{Key: Key, Range: pr.String(), Max: pr.Size, Offset: offset, Storage: store}
	return a, nil
}

// Range is the port range.
func (a *PortAllocator) Range() utilnet.PortRange { return a.pr }

// Allocate takes port. Errors: *ErrNotInRange, ErrAllocated, storage errors.
func (a *PortAllocator) Allocate(ctx context.Context, port int) error {
	if !a.pr.Contains(port) {
		return &ErrNotInRange{ValidPorts: a.pr.String()}
	}
	if err := a.alloc.Allocate(ctx, port-a.pr.Base); err != nil {
		if errors.Is(err, allocator.ErrAllocated) {
			return ErrAllocated
		}
		return err
	}
	return nil
}

// AllocateNext takes a free port. Errors: ErrFull, storage errors.
func (a *PortAllocator) AllocateNext(ctx context.Context) (int, error) {
	o, err := a.alloc.AllocateNext(ctx)
	if err != nil {
		if errors.Is(err, allocator.ErrFull) {
			return 0, ErrFull
		}
		return 0, err
	}
	return a.pr.Base + o, nil
}

// Release frees port; a port outside the range or not taken is a no-op.
func (a *PortAllocator) Release(ctx context.Context, port int) error {
	if !a.pr.Contains(port) {
		return nil
	}
	return a.alloc.Release(ctx, port-a.pr.Base)
}

// Has reports whether port is taken.
func (a *PortAllocator) Has(ctx context.Context, port int) (bool, error) {
	if !a.pr.Contains(port) {
		return false, nil
	}
	return a.alloc.Has(ctx, port-a.pr.Base)
}

// Mark records ports as taken (the repair at start), ignoring those outside the range.
func (a *PortAllocator) Mark(ctx context.Context, ports []int) error {
	var offsets []int
	for _, p := range ports {
		if a.pr.Contains(p) {
			offsets = append(offsets, p-a.pr.Base)
		}
	}
	return a.alloc.Mark(ctx, offsets)
}
