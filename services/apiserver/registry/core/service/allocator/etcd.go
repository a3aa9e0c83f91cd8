// Package allocator hands out offsets of a fixed-size range (service IPs, node ports)
// from a bitmap kept in ONE etcd key, so every apiserver sharing the etcd sees the same
// allocations and none survive only in memory. Mirrors
// k8s.io/kubernetes/pkg/registry/core/service/allocator (AllocationBitmap) and its
// storage.Etcd: the bitmap is a core/v1 RangeAllocation whose data is the big-endian
// bytes of a big.Int with bit i set when offset i is taken, and each change is a
// compare-and-swap on the key's ModRevision (GuaranteedUpdate), retried on a lost race.
package allocator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/storage"
)

var (
	// ErrAllocated is returned when the offset asked for is taken.
	ErrAllocated = errors.New("already allocated")
	// ErrFull is returned when no offset is free.
	ErrFull = errors.New("range is full")
)

// Etcd is a bitmap allocator of Max offsets [0, Max) over the RangeAllocation at Key.
// Its methods are safe for concurrent use; within one process they are serialized (as
// kube's storage.Etcd holds its lock across the update), so concurrent requests do not
// race each other for the key, only other apiservers do.
type Etcd struct {
	// Key is the etcd key, e.g. "/registry/ranges/serviceips".
	Key string
	// Range names the range in the stored object, e.g. "10.96.0.0/12" or "30000-32767".
	// A stored bitmap of another range is discarded (kube's repair does the same when
	// the flags change): its offsets mean other addresses.
	Range string
	// Max is the number of offsets.
	Max int
	// Offset is where AllocateNext starts looking, so that offsets below it stay free
	// for explicit requests as long as possible (kube's dynamic block,
	// randomScanStrategyWithOffset). 0 scans the whole range.
	Offset int
	// Storage holds the RangeAllocation (an etcd3 store of corev1.RangeAllocation).
	Storage storage.Interface

	mu sync.Mutex
}

// update applies change to the current bitmap in one compare-and-swap, creating the key
// the first time. change reports an error to abort without writing.
func (e *Etcd) update(ctx context.Context, change func(bits *big.Int) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		out := &corev1.RangeAllocation{}
		err := e.Storage.GuaranteedUpdate(ctx, e.Key, out, nil, func(input runtime.Object) (runtime.Object, error) {
			existing := input.(*corev1.RangeAllocation)
			bits := e.bitsOf(existing)
			if err := change(bits); err != nil {
				return nil, err
			}
			next := existing.DeepCopy()
			next.Range, next.Data = e.Range, bits.Bytes()
			return next, nil
		})
		if !storage.IsNotFound(err) {
			return err
		}
		bits := new(big.Int)
		if err := change(bits); err != nil {
			return err
		}
		initial := &corev1.RangeAllocation{ObjectMeta: metav1.ObjectMeta{Name: e.Key}, Range: e.Range, Data: bits.Bytes()}
		err = e.Storage.Create(ctx, e.Key, initial, &corev1.RangeAllocation{})
		if !storage.IsExist(err) {
			return err
		}
		// Another apiserver created it first: apply the change over theirs.
	}
}

// bitsOf is the stored bitmap, or an empty one when it belongs to another range.
func (e *Etcd) bitsOf(r *corev1.RangeAllocation) *big.Int {
	if r.Range != e.Range {
		return new(big.Int)
	}
	return new(big.Int).SetBytes(r.Data)
}

// Allocate takes offset. Errors: ErrAllocated when it is taken; an error for an offset
// outside [0, Max); storage errors.
func (e *Etcd) Allocate(ctx context.Context, offset int) error {
	if offset < 0 || offset >= e.Max {
		return fmt.Errorf("offset %d is outside [0, %d)", offset, e.Max)
	}
	return e.update(ctx, func(bits *big.Int) error {
		if bits.Bit(offset) == 1 {
			return ErrAllocated
		}
		bits.SetBit(bits, offset, 1)
		return nil
	})
}

// AllocateNext takes a free offset, chosen at random at or above Offset, else below it
// (kube's random scan with offset), and returns it. Errors: ErrFull; storage errors.
func (e *Etcd) AllocateNext(ctx context.Context) (int, error) {
	var got int
	err := e.update(ctx, func(bits *big.Int) error {
		offset, ok := e.free(bits)
		if !ok {
			return ErrFull
		}
		bits.SetBit(bits, offset, 1)
		got = offset
		return nil
	})
	return got, err
}

// free picks a clear bit: from a random start in [Offset, Max) upwards, wrapping within
// the upper block, then the lower block [0, Offset).
func (e *Etcd) free(bits *big.Int) (int, bool) {
	lo := min(max(e.Offset, 0), e.Max)
	if upper := e.Max - lo; upper > 0 {
		start := rand.IntN(upper)
		for i := range upper {
			if o := lo + (start+i)%upper; bits.Bit(o) == 0 {
				return o, true
			}
		}
	}
	if lo > 0 {
		start := rand.IntN(lo)
		for i := range lo {
			if o := (start + i) % lo; bits.Bit(o) == 0 {
				return o, true
			}
		}
	}
	return 0, false
}

// Release frees offset; releasing a free or out-of-range offset is a no-op.
func (e *Etcd) Release(ctx context.Context, offset int) error {
	if offset < 0 || offset >= e.Max {
		return nil
	}
	return e.update(ctx, func(bits *big.Int) error {
		bits.SetBit(bits, offset, 0)
		return nil
	})
}

// Has reports whether offset is taken, read from etcd.
func (e *Etcd) Has(ctx context.Context, offset int) (bool, error) {
	set, err := e.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	return offset >= 0 && set.Bit(offset) == 1, nil
}

// Snapshot is the stored bitmap (empty when the key does not exist yet).
func (e *Etcd) Snapshot(ctx context.Context) (*big.Int, error) {
	out := &corev1.RangeAllocation{}
	if err := e.Storage.Get(ctx, e.Key, storage.GetOptions{}, out); err != nil {
		if storage.IsNotFound(err) {
			return new(big.Int), nil
		}
		return nil, err
	}
	return e.bitsOf(out), nil
}

// Mark sets every offset in taken (offsets outside [0, Max) are ignored), in one
// update. It is the safe half of kube's repair controller: allocations of Services that
// exist but are missing from the bitmap (a range key lost or recreated for a new range)
// are restored; it never frees anything, since an allocation may belong to a Service
// whose create is still in flight.
func (e *Etcd) Mark(ctx context.Context, taken []int) error {
	return e.update(ctx, func(bits *big.Int) error {
		for _, o := range taken {
			if o >= 0 && o < e.Max {
				bits.SetBit(bits, o, 1)
			}
		}
		return nil
	})
}
