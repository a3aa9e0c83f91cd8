// Package leasekv gives objects a time to live in etcd: a clientv3.KV that attaches an
// etcd lease to every Put, so etcd itself deletes the key when the lease expires and
// watchers see an ordinary DELETE. It mirrors the TTL path of kube-apiserver's etcd3
// store (k8s.io/apiserver/pkg/storage/etcd3/lease_manager.go), which events use with
// --event-ttl=1h; skiff wraps the client instead of threading a ttl through
// storage.Interface, so only the events store pays for it.
package leasekv

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NewClient returns a client whose KV attaches a lease of at least ttl to every Put
// (alone or inside a Txn) and whose Watcher and Lease are client's. Store it only where
// every key written should expire, e.g. the events store. ttl is rounded up to seconds.
// The returned client does not own client's connection: Close only ends its own context.
func NewClient(ctx context.Context, client *clientv3.Client, ttl time.Duration) *clientv3.Client {
	c := clientv3.NewCtxClient(ctx)
	m := &manager{lease: client.Lease, ttl: int64((ttl + time.Second - 1) / time.Second)}
	// Like kube's leaseManager, puts within 5% of the TTL (at most a minute) share one
	// lease, and that lease lives that much longer, so no key expires early.
	m.reuse = m.ttl / 20
	if m.reuse > 60 {
		m.reuse = 60
	}
	c.KV = &kv{KV: client.KV, m: m}
	c.Watcher = client.Watcher
	c.Lease = client.Lease
	return c
}

// manager hands out leases, granting a new one only when the current one is older than
// the reuse window.
type manager struct {
	lease clientv3.Lease
	ttl   int64 // seconds
	reuse int64 // seconds

	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time
}

// leaseID returns a lease with at least ttl seconds left.
func (m *manager) leaseID(ctx context.Context) (clientv3.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.id != 0 && now.Sub(m.granted) < time.Duration(m.reuse)*time.Second {
		return m.id, nil
	}
	resp, err := m.lease.Grant(ctx, m.ttl+m.reuse)
	if err != nil {
		return 0, fmt.Errorf("grant lease of %d s: %w", m.ttl+m.reuse, err)
	}
	m.id, m.granted = resp.ID, now
	return m.id, nil
}

// withLease rebuilds every put among ops with a lease.
func (m *manager) withLease(ctx context.Context, ops []clientv3.Op) ([]clientv3.Op, error) {
	var id clientv3.LeaseID
	out := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		if !op.IsPut() {
			out[i] = op
			continue
		}
		if id == 0 {
			var err error
			if id, err = m.leaseID(ctx); err != nil {
				return nil, err
			}
		}
		opts := []clientv3.OpOption{clientv3.WithLease(id)}
		if op.IsPrevKV() {
			opts = append(opts, clientv3.WithPrevKV())
		}
		out[i] = clientv3.OpPut(string(op.KeyBytes()), string(op.ValueBytes()), opts...)
	}
	return out, nil
}

// kv is a clientv3.KV whose puts carry a lease.
type kv struct {
	clientv3.KV
	m *manager
}

func (k *kv) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	id, err := k.m.leaseID(ctx)
	if err != nil {
		return nil, err
	}
	return k.KV.Put(ctx, key, val, append(opts, clientv3.WithLease(id))...)
}

func (k *kv) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	ops, err := k.m.withLease(ctx, []clientv3.Op{op})
	if err != nil {
		return clientv3.OpResponse{}, err
	}
	return k.KV.Do(ctx, ops[0])
}

func (k *kv) Txn(ctx context.Context) clientv3.Txn {
	return &txn{ctx: ctx, kv: k}
}

// txn collects the transaction and adds leases at Commit, where an error can be returned.
type txn struct {
	ctx              context.Context
	kv               *kv
	cmps             []clientv3.Cmp
	thenOps, elseOps []clientv3.Op
}

func (t *txn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.cmps = append(t.cmps, cs...); return t }
func (t *txn) Then(ops ...clientv3.Op) clientv3.Txn { t.thenOps = append(t.thenOps, ops...); return t }
func (t *txn) Else(ops ...clientv3.Op) clientv3.Txn { t.elseOps = append(t.elseOps, ops...); return t }

func (t *txn) Commit() (*clientv3.TxnResponse, error) {
	thenOps, err := t.kv.m.withLease(t.ctx, t.thenOps)
	if err != nil {
		return nil, err
	}
	elseOps, err := t.kv.m.withLease(t.ctx, t.elseOps)
	if err != nil {
		return nil, err
	}
	return t.kv.KV.Txn(t.ctx).If(t.cmps...).Then(thenOps...).Else(elseOps...).Commit()
}
