package etcd3_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// startOwnEtcd runs an etcd of the test's own (compaction would cut the history other
// tests of the package read in the shared one) and returns a gRPC client and an
// in-process client of it, as a compose apiserver and the all-in-one reach etcd.
func startOwnEtcd(t *testing.T) (overGRPC, inProcess *clientv3.Client) {
	t.Helper()
	ctx := context.Background()
	e, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if overGRPC, err = e.Client(); err != nil {
		t.Fatal(err)
	}
	inProcess = e.InProcessClient(nil)
	t.Cleanup(func() { _ = overGRPC.Close(); _ = inProcess.Close() })
	return overGRPC, inProcess
}

// put writes key and returns the revision of the write.
func put(t *testing.T, c *clientv3.Client, key, value string) int64 {
	t.Helper()
	resp, err := c.Put(context.Background(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// compacted reports whether a read at rev gets etcd's ErrCompacted.
func compacted(t *testing.T, c *clientv3.Client, rev int64) bool {
	t.Helper()
	_, err := c.Get(context.Background(), "k", clientv3.WithRev(rev))
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatal(err)
	}
	return err != nil
}

// TestCompactorsTakeTurns: two apiservers' compactors on one etcd. A round compacts up
// to the revision its previous round saw, only if no one compacted in between; the
// other adopts the new count and takes over when the first stops.
func TestCompactorsTakeTurns(t *testing.T) {
	overGRPC, inProcess := startOwnEtcd(t)
	a := etcd3.NewCompactor(overGRPC, time.Hour) // Compact is called by hand below
	b := etcd3.NewCompactor(inProcess, time.Hour)
	ctx := context.Background()
	compactRevision := func() int64 {
		resp, err := overGRPC.Get(ctx, etcd3.CompactRevisionKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v, %v", etcd3.CompactRevisionKey, resp, err)
		}
		rev, _ := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		return rev
	}

	first := put(t, overGRPC, "k", "1")
	for _, c := range []*etcd3.Compactor{a, b} { // a learns the revision; b learns a went first
		if err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if compacted(t, overGRPC, first) {
		t.Fatal("the first rounds compacted: they only learn the revision")
	}

	second := put(t, overGRPC, "k", "2")
	if err := a.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if !compacted(t, overGRPC, first) {
		t.Fatalf("revision %d readable after a's second round", first)
	}
	if compacted(t, overGRPC, second) {
		t.Fatalf("revision %d compacted: newer than a's first round", second)
	}
	aTarget := compactRevision()

	third := put(t, overGRPC, "k", "3")
	if err := b.Compact(ctx); err != nil { // a compacted since b's last round: b waits
		t.Fatal(err)
	}
	if compacted(t, overGRPC, second) || compactRevision() != aTarget {
		t.Fatalf("b compacted in the round after a's compaction")
	}
	if err := b.Compact(ctx); err != nil { // a stopped: b's turn
		t.Fatal(err)
	}
	if !compacted(t, overGRPC, second) || compacted(t, overGRPC, third) {
		t.Fatalf("after b's round: revision %d should be compacted and %d kept", second, third)
	}
	if got, err := overGRPC.Get(ctx, "k"); err != nil || string(got.Kvs[0].Value) != "3" {
		t.Fatalf("latest value after compactions: %v, %v", got, err)
	}
}

// TestCompactorRun: a running compactor compacts history older than two intervals.
func TestCompactorRun(t *testing.T) {
	client, _ := startOwnEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); etcd3.NewCompactor(client, 20*time.Millisecond).Run(ctx) }()
	defer func() { cancel(); <-done }()
	old := put(t, client, "k", "old")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		put(t, client, "k", "new")
		return compacted(t, client, old), nil
	}); err != nil {
		t.Fatalf("revision %d not compacted: %v", old, err)
	}
}
