package ipallocator

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

var testClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &testClient))
}

// newRange is an allocator of cidr over the shared etcd, as one apiserver builds it; the
// test's first call empties the key so every test starts from no allocations.
func newRange(t *testing.T, cidr string, fresh bool) *Range {
	t.Helper()
	if fresh {
		if _, err := testClient.Delete(context.Background(), Key); err != nil {
			t.Fatal(err)
		}
	}
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(n, etcd3.New(testClient, scheme.StorageCodec, func() runtime.Object { return &corev1.RangeAllocation{} }))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestTwoAllocatorsOverOneKeyNeverShareAnIP(t *testing.T) {
	ctx := testContext(t)
	a := newRange(t, "10.0.0.0/24", true)
	b := newRange(t, "10.0.0.0/24", false) // a second apiserver over the same etcd
	const n = 200
	ips := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a
			if i%2 == 1 {
				r = b
			}
			ip, err := r.AllocateNext(ctx)
			if err != nil {
				t.Errorf("allocate: %v", err)
				return
			}
			ips <- ip.String()
		}()
	}
	wg.Wait()
	close(ips)
	seen := map[string]bool{}
	for ip := range ips {
		if seen[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct IPs, want %d", len(seen), n)
	}
}

func TestAllocationsSurviveARestartAndAreReleased(t *testing.T) {
	ctx := testContext(t)
	ip := net.ParseIP("10.96.0.10")
	if err := newRange(t, "10.96.0.0/12", true).Allocate(ctx, ip); err != nil {
		t.Fatal(err)
	}
	restarted := newRange(t, "10.96.0.0/12", false)
	if err := restarted.Allocate(ctx, ip); !errors.Is(err, ErrAllocated) {
		t.Fatalf("after a restart: want %v, got %v", ErrAllocated, err)
	}
	if err := restarted.Release(ctx, ip); err != nil {
		t.Fatal(err)
	}
	if err := newRange(t, "10.96.0.0/12", false).Allocate(ctx, ip); err != nil {
		t.Fatalf("a released IP is free again: %v", err)
	}
}

func TestAllocateErrors(t *testing.T) {
	ctx := testContext(t)
	r := newRange(t, "192.168.1.0/30", true) // .1 and .2 only
	for _, tc := range []struct {
		name, ip, want string
	}{
		{"the network address", "192.168.1.0", "the provided IP (192.168.1.0) is not in the valid range. The range of valid IPs is 192.168.1.0/30"},
		{"the broadcast address", "192.168.1.3", "the provided IP (192.168.1.3) is not in the valid range. The range of valid IPs is 192.168.1.0/30"},
		{"outside the range", "10.0.0.1", "the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 192.168.1.0/30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := r.Allocate(ctx, net.ParseIP(tc.ip)); err == nil || err.Error() != tc.want {
				t.Fatalf("want %q, got %v", tc.want, err)
			}
		})
	}
	for range 2 {
		if _, err := r.AllocateNext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.AllocateNext(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("a full range: want %v, got %v", ErrFull, err)
	}
}

func TestDynamicAllocationsLeaveTheLowBlockFree(t *testing.T) {
	ctx := testContext(t)
	r := newRange(t, "10.96.0.0/24", true) // 254 addresses: offset 16
	for range 50 {
		ip, err := r.AllocateNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ip[len(ip)-1] <= 16 {
			t.Fatalf("dynamic allocation %s is in the block kept for requests", ip)
		}
	}
}

func TestMarkRestoresWithoutFreeing(t *testing.T) {
	ctx := testContext(t)
	r := newRange(t, "10.96.0.0/24", true)
	kept := net.ParseIP("10.96.0.20")
	if err := r.Allocate(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if err := r.Mark(ctx, []net.IP{net.ParseIP("10.96.0.30"), net.ParseIP("172.16.0.1")}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"10.96.0.20", "10.96.0.30"} {
		if has, err := r.Has(ctx, net.ParseIP(ip)); err != nil || !has {
			t.Fatalf("%s: want taken, got %v %v", ip, has, err)
		}
	}
}

func TestANewRangeIgnoresTheOldBitmap(t *testing.T) {
	ctx := testContext(t)
	if err := newRange(t, "10.96.0.0/24", true).Allocate(ctx, net.ParseIP("10.96.0.5")); err != nil {
		t.Fatal(err)
	}
	other := newRange(t, "10.100.0.0/24", false)
	if err := other.Allocate(ctx, net.ParseIP("10.100.0.5")); err != nil {
		t.Fatalf("the same offset of another range: %v", err)
	}
}
