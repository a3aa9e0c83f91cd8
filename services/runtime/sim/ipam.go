package sim

import (
	"errors"
	"net/netip"
)

// PodCIDR is the range simulated pod IPs come from: containerd's and
// podman's default bridge network.
const PodCIDR = "10.88.0.0/16"

// errPoolExhausted is returned when every address of the pool is in use.
var errPoolExhausted = errors.New("no free pod IP in " + PodCIDR)

// ipPool hands out the addresses of PodCIDR except the network address,
// the gateway (.0.1) and the broadcast address. Like CNI's host-local IPAM it
// continues after the last address handed out, so a released address is not
// reused at once. Not safe for concurrent use.
type ipPool struct {
	base netip.Addr
	next uint32 // offset to try first
	used map[netip.Addr]bool
}

const (
	firstOffset = 2         // .0.0 is the network, .0.1 the gateway
	lastOffset  = 1<<16 - 2 // .255.255 is the broadcast address
)

func newIPPool() *ipPool {
	base := netip.MustParsePrefix(PodCIDR).Addr()
	return &ipPool{base: base, next: firstOffset, used: map[netip.Addr]bool{}}
}

func (p *ipPool) addr(offset uint32) netip.Addr {
	b := p.base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += offset
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (p *ipPool) allocate() (netip.Addr, error) {
	const size = lastOffset - firstOffset + 1
	for i := uint32(0); i < size; i++ {
		off := firstOffset + (p.next-firstOffset+i)%size
		a := p.addr(off)
		if !p.used[a] {
			p.used[a] = true
			p.next = off + 1
			if p.next > lastOffset {
				p.next = firstOffset
			}
			return a, nil
		}
	}
	return netip.Addr{}, errPoolExhausted
}

func (p *ipPool) release(a netip.Addr) { delete(p.used, a) }
