package leasekv

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"skiff.dev/services/internal/embedetcd"

	"k8s.io/apimachinery/pkg/util/wait"
)

// raw is a plain client of the one embedded etcd the tests share (distinct keys keep
// them apart).
var raw *clientv3.Client

func TestMain(m *testing.M) { os.Exit(embedetcd.RunTests(m, &raw)) }

func TestEveryPutCarriesALease(t *testing.T) {
	ctx := context.Background()
	c := NewClient(ctx, raw, time.Hour)

	if _, err := c.Put(ctx, "/a", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/b"), "=", 0)).Then(clientv3.OpPut("/b", "2")).Else(clientv3.OpGet("/b")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, clientv3.OpPut("/c", "3")); err != nil {
		t.Fatal(err)
	}
	// Reads and deletes pass through untouched.
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/b"), "=", 0)).Then(clientv3.OpPut("/b", "x")).Else(clientv3.OpGet("/b")).Commit(); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"/a", "/b", "/c"} {
		resp, err := raw.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", key, resp, err)
		}
		lease := clientv3.LeaseID(resp.Kvs[0].Lease)
		if lease == 0 {
			t.Fatalf("%s has no lease", key)
		}
		ttl, err := raw.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		// At least the TTL asked for, plus at most the reuse window (3 min for 1 h).
		if ttl.TTL < 3600-5 || ttl.TTL > 3600+180 {
			t.Fatalf("%s: lease TTL %d s, want about 3600 s", key, ttl.TTL)
		}
	}
	if resp, _ := raw.Get(ctx, "/b"); string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("/b = %q: the Else branch wrote", resp.Kvs[0].Value)
	}
}

func TestKeyExpiresWithItsLease(t *testing.T) {
	ctx := context.Background()
	c := NewClient(ctx, raw, time.Second)
	if _, err := c.Put(ctx, "/short", "1"); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := raw.Get(ctx, "/short")
		if err != nil {
			return false, err
		}
		return len(resp.Kvs) == 0, nil
	}); err != nil {
		t.Fatalf("key outlived its 1 s lease by 20 s: %v", err)
	}
}
