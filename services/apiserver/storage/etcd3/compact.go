package etcd3

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CompactRevisionKey is the etcd key apiservers sharing an etcd take turns compacting
// through: its value is the revision last compacted, its version counts compactions.
// Kube's compactRevKey, so skiff and kube-apiserver on one etcd compact together.
const CompactRevisionKey = "compact_rev_key"

// DefaultCompactionInterval is how much history etcd keeps: kube-apiserver's
// --etcd-compaction-interval default.
const DefaultCompactionInterval = 5 * time.Minute

// Compactor compacts etcd's history older than one interval, so that the revisions of
// every write (each pod's create, bind and status updates, each Lease renewal) do not
// pile up in etcd's in-memory key index and its database until the space quota stops
// all writes. A read or watch at a compacted revision gets 410 Gone, which clients
// answer by listing again. Mirrors k8s.io/apiserver/pkg/storage/etcd3/compact.go.
//
// Every interval it sends one transaction: if CompactRevisionKey's version is the one
// it saw last time, it writes the revision it saw last time there (one more version)
// and compacts up to that revision; otherwise another apiserver compacted since, and it
// adopts that version. Either way it remembers etcd's current revision for the next
// round. So with several apiservers one compacts each interval, another takes over
// within two intervals when it stops, and history is kept one to two intervals long.
type Compactor struct {
	client   *clientv3.Client
	interval time.Duration
	log      *slog.Logger

	// version is CompactRevisionKey's version as last seen (0: it does not exist);
	// revision is etcd's revision at that moment, the next compaction's target.
	version, revision int64
}

// NewCompactor returns a Compactor of client's etcd that compacts every interval (> 0).
func NewCompactor(client *clientv3.Client, interval time.Duration) *Compactor {
	return &Compactor{client: client, interval: interval, log: slog.Default().With("component", "compactor")}
}

// Run compacts every interval until ctx ends; its first round, at once, only learns the
// revision, so the first compaction comes after one interval. A failed round is logged
// and tried again the next interval.
func (c *Compactor) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Compact(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("compacting etcd; will retry", "revision", c.revision, "err", err)
		}
	}, c.interval)
}

// Compact is one round: it compacts up to the revision of the previous round if no one
// else compacted since, and records etcd's current revision. Errors are etcd's; a lost
// race with another apiserver is no error.
func (c *Compactor) Compact(ctx context.Context) error {
	resp, err := c.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(CompactRevisionKey), "=", c.version)).
		Then(clientv3.OpPut(CompactRevisionKey, strconv.FormatInt(c.revision, 10))).
		Else(clientv3.OpGet(CompactRevisionKey)).
		Commit()
	if err != nil {
		return err
	}
	target := c.revision
	c.revision = resp.Header.Revision
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			c.version = kvs[0].Version
		} else {
			c.version = 0 // deleted by hand: start again from nothing
		}
		return nil
	}
	c.version++
	if target == 0 { // the first round: nothing known to compact yet
		return nil
	}
	if _, err := c.client.Compact(ctx, target); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return err // compacted already past target (by hand): no error
	}
	c.log.Debug("compacted etcd", "revision", target)
	return nil
}
