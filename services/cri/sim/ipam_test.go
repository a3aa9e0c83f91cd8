package sim

import (
	"errors"
	"net/netip"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestIPPool(t *testing.T) {
	p := newIPPool()
	first, err := p.allocate()
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddr("10.88.0.2"); first != want {
		t.Errorf("first address %s, want %s (network and gateway are skipped)", first, want)
	}
	second, _ := p.allocate()
	p.release(first)
	if third, _ := p.allocate(); third == first || third == second {
		t.Errorf("allocate after release returned %s again; want the next free address", third)
	}

	// Fill the pool: every address but the reserved ones, then exhaustion.
	n := 2 // second and third are in use
	for {
		a, err := p.allocate()
		if errors.Is(err, errPoolExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if a == netip.MustParseAddr("10.88.255.255") || a == netip.MustParseAddr("10.88.0.1") {
			t.Fatalf("reserved address %s handed out", a)
		}
		n++
	}
	if want := 1<<16 - 3; n != want {
		t.Errorf("pool held %d addresses, want %d", n, want)
	}
	p.release(second)
	if a, err := p.allocate(); err != nil || a != second {
		t.Errorf("after release in a full pool: %s, %v; want %s", a, err, second)
	}
}

func TestIPPoolForNodeRange(t *testing.T) {
	p, err := newIPPoolFor("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for {
		a, err := p.allocate()
		if errors.Is(err, errPoolExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !netip.MustParsePrefix("10.244.3.0/24").Contains(a) || a == netip.MustParseAddr("10.244.3.1") || a == netip.MustParseAddr("10.244.3.255") {
			t.Fatalf("address %s handed out from 10.244.3.0/24", a)
		}
		seen[a] = true
	}
	if len(seen) != 253 {
		t.Errorf("a /24 held %d addresses, want 253 (.2 to .254)", len(seen))
	}
	for _, bad := range []string{"nope", "fd00::/64", "10.0.0.0/31"} {
		if _, err := newIPPoolFor(bad); err == nil {
			t.Errorf("newIPPoolFor(%q) accepted it", bad)
		}
	}
}

func TestSetPodCIDRMovesNewIPsToTheNodeRange(t *testing.T) {
	d := newDriver()
	cfg := &runtimeapi.PodSandboxConfig{}
	before, err := d.RunSandbox("a", cfg)
	if err != nil || !netip.MustParsePrefix(PodCIDR).Contains(netip.MustParseAddr(before)) {
		t.Fatalf("before a pod CIDR: %q, %v; want an IP of %s", before, err, PodCIDR)
	}
	if err := d.SetPodCIDR("10.244.5.0/24,fd00::/64"); err != nil {
		t.Fatal(err)
	}
	after, err := d.RunSandbox("b", cfg)
	if err != nil || after != "10.244.5.2" {
		t.Errorf("after SetPodCIDR: %q, %v; want 10.244.5.2", after, err)
	}
	if err := d.SetPodCIDR("10.244.5.0/33"); err == nil {
		t.Error("an invalid range was accepted")
	}
}
