package portallocator

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

var testClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &testClient))
}

func newAllocator(t *testing.T, ports string) *PortAllocator {
	t.Helper()
	pr, err := utilnet.ParsePortRange(ports)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(*pr, etcd3.New(testClient, scheme.StorageCodec, func() runtime.Object { return &corev1.RangeAllocation{} }))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestPortAllocator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testClient.Delete(ctx, Key); err != nil {
		t.Fatal(err)
	}
	a := newAllocator(t, "30000-30003")
	if err := a.Allocate(ctx, 30001); err != nil {
		t.Fatal(err)
	}
	restarted := newAllocator(t, "30000-30003")
	if err := restarted.Allocate(ctx, 30001); !errors.Is(err, ErrAllocated) || err.Error() != "provided port is already allocated" {
		t.Fatalf("a taken port after a restart: got %v", err)
	}
	if err := restarted.Allocate(ctx, 32000); err == nil || err.Error() != "provided port is not in the valid range. The range of valid ports is 30000-30003" {
		t.Fatalf("out of range: got %v", err)
	}
	seen := map[int]bool{30001: true}
	for range 3 {
		p, err := restarted.AllocateNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] || p < 30000 || p > 30003 {
			t.Fatalf("port %d handed out twice or out of range", p)
		}
		seen[p] = true
	}
	if _, err := a.AllocateNext(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("full: got %v", err)
	}
	if err := a.Release(ctx, 30002); err != nil {
		t.Fatal(err)
	}
	if p, err := restarted.AllocateNext(ctx); err != nil || p != 30002 {
		t.Fatalf("the released port: got %d %v", p, err)
	}
}
