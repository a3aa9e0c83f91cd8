package sim

import (
	"errors"
	"net/netip"
	"testing"
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
