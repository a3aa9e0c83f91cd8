package nodeipam

import (
	"errors"
	"net"
	"testing"
)

func mustCIDR(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, c, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCIDRSetAllocatesEachSubnetOnce(t *testing.T) {
	for _, tc := range []struct {
		name, cluster string
		mask          int
		want          []string
	}{
		{"IPv4 /24s of a /22", "10.244.0.0/22", 24, []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"}},
		{"IPv6 /64s of a /63", "fd00:10:244::/63", 64, []string{"fd00:10:244::/64", "fd00:10:244:1::/64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewCIDRSet(mustCIDR(t, tc.cluster), tc.mask)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				got, err := s.AllocateNext()
				if err != nil || got.String() != want {
					t.Fatalf("AllocateNext = %v, %v; want %s", got, err, want)
				}
			}
			if _, err := s.AllocateNext(); !errors.Is(err, ErrCIDRRangeNoCIDRsRemaining) {
				t.Errorf("AllocateNext on a full set = %v, want ErrCIDRRangeNoCIDRsRemaining", err)
			}
			if err := s.Release(mustCIDR(t, tc.want[1])); err != nil {
				t.Fatal(err)
			}
			if got, err := s.AllocateNext(); err != nil || got.String() != tc.want[1] {
				t.Errorf("AllocateNext after a release = %v, %v; want %s", got, err, tc.want[1])
			}
		})
	}
}

func TestCIDRSetOccupySkipsTakenSubnets(t *testing.T) {
	s, err := NewCIDRSet(mustCIDR(t, "10.244.0.0/16"), 24)
	if err != nil {
		t.Fatal(err)
	}
	for _, taken := range []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/23"} {
		if err := s.Occupy(mustCIDR(t, taken)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.AllocateNext(); err != nil || got.String() != "10.244.4.0/24" {
		t.Errorf("AllocateNext = %v, %v; want 10.244.4.0/24", got, err)
	}
	if err := s.Occupy(mustCIDR(t, "192.168.0.0/24")); err == nil {
		t.Error("Occupy outside the cluster CIDR succeeded")
	}
}

func TestNewCIDRSetRejectsBadMasks(t *testing.T) {
	for _, mask := range []int{7, 33, 8 + 16 + 1} {
		if _, err := NewCIDRSet(mustCIDR(t, "10.0.0.0/8"), mask); err == nil {
			t.Errorf("NewCIDRSet(10.0.0.0/8, %d) succeeded", mask)
		}
	}
}
