package sim

import (
	"errors"
	"fmt"
	"net/netip"
)

// errPoolExhausted is returned when every address of the pool is in use.
var errPoolExhausted = errors.New("no free pod IP")

// PodCIDR is the range simulated pod IPs come from until the kubelet hands
// the node's pod CIDR over (CRI UpdateRuntimeConfig): containerd's and
// podman's default bridge network.
const PodCIDR = "10.88.0.0/16"

// ipPool hands out the addresses of an IPv4 prefix except the network
// address, the gateway (network+1) and the broadcast address. Like CNI's
// host-local IPAM it continues after the last address handed out, so a
// released address is not reused at once. Not safe for concurrent use.
type ipPool struct {
	prefix netip.Prefix
	base   netip.Addr
	last   uint32 // offset of the last usable address
	next   uint32 // offset to try first
	used   map[netip.Addr]bool
}

const firstOffset = 2 // network+0 is the network, network+1 the gateway

func newIPPool() *ipPool {
	p, _ := newIPPoolFor(PodCIDR)
	return p
}

// newIPPoolFor returns the pool of cidr. Errors: not an IPv4 prefix, or one
// too small to hold a pod (narrower than /30).
func newIPPoolFor(cidr string) (*ipPool, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %q: want an IPv4 range of at least /30", cidr)
	}
	prefix = prefix.Masked()
	last := uint32(1)<<(32-prefix.Bits()) - 2 // the broadcast address is last+1
	return &ipPool{prefix: prefix, base: prefix.Addr(), last: last, next: firstOffset, used: map[netip.Addr]bool{}}, nil
}

func (p *ipPool) addr(offset uint32) netip.Addr {
	b := p.base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += offset
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (p *ipPool) allocate() (netip.Addr, error) {
	size := p.last - firstOffset + 1
	for i := uint32(0); i < size; i++ {
		off := firstOffset + (p.next-firstOffset+i)%size
		a := p.addr(off)
		if !p.used[a] {
			p.used[a] = true
			p.next = off + 1
			if p.next > p.last {
				p.next = firstOffset
			}
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w in %s", errPoolExhausted, p.prefix)
}

func (p *ipPool) release(a netip.Addr) { delete(p.used, a) }
