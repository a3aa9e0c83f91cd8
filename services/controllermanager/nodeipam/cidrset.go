package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
)

// ErrCIDRRangeNoCIDRsRemaining is AllocateNext's error when every node CIDR is taken.
var ErrCIDRRangeNoCIDRsRemaining = errors.New("CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range")

// maxPrefixDiff bounds how many node CIDRs one cluster CIDR may hold (2^16, as kube's
// clusterSubnetMaxDiff), so the bitmap stays small.
const maxPrefixDiff = 16

// CidrSet hands out the node CIDRs (subnets of one prefix length) of one cluster CIDR,
// each at most once. Mirrors kube's pkg/controller/nodeipam/ipam/cidrset.
type CidrSet struct {
	mu            sync.Mutex
	clusterCIDR   *net.IPNet
	clusterBits   int // 32 or 128
	nodeMaskSize  int
	maxCIDRs      int
	used          big.Int // bit i: the i-th node CIDR is taken
	nextCandidate int
	allocated     int
}

// NewCIDRSet splits clusterCIDR into subnets of nodeMaskSize bits. Errors: a mask size
// not longer than the cluster's, or more than 2^16 subnets.
func NewCIDRSet(clusterCIDR *net.IPNet, nodeMaskSize int) (*CidrSet, error) {
	clusterMask, bits := clusterCIDR.Mask.Size()
	if nodeMaskSize < clusterMask || nodeMaskSize > bits {
		return nil, fmt.Errorf("node CIDR mask size %d must be between the cluster CIDR's %d and %d", nodeMaskSize, clusterMask, bits)
	}
	if nodeMaskSize-clusterMask > maxPrefixDiff {
		return nil, fmt.Errorf("node CIDR mask size %d is more than %d bits longer than the cluster CIDR %s", nodeMaskSize, maxPrefixDiff, clusterCIDR)
	}
	base := &net.IPNet{IP: clusterCIDR.IP.Mask(clusterCIDR.Mask), Mask: clusterCIDR.Mask}
	return &CidrSet{clusterCIDR: base, clusterBits: bits, nodeMaskSize: nodeMaskSize, maxCIDRs: 1 << (nodeMaskSize - clusterMask)}, nil
}

// AllocateNext takes the next free node CIDR, searching round-robin from the last one
// handed out. Errors: ErrCIDRRangeNoCIDRsRemaining.
func (s *CidrSet) AllocateNext() (*net.IPNet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.allocated == s.maxCIDRs {
		return nil, ErrCIDRRangeNoCIDRsRemaining
	}
	for i := range s.maxCIDRs {
		candidate := (s.nextCandidate + i) % s.maxCIDRs
		if s.used.Bit(candidate) == 0 {
			s.used.SetBit(&s.used, candidate, 1)
			s.allocated++
			s.nextCandidate = (candidate + 1) % s.maxCIDRs
			return s.indexToCIDR(candidate), nil
		}
	}
	return nil, ErrCIDRRangeNoCIDRsRemaining
}

// Occupy marks every node CIDR overlapping cidr as taken (a node's existing podCIDR at
// start). Errors: cidr outside the cluster CIDR.
func (s *CidrSet) Occupy(cidr *net.IPNet) error {
	begin, end, err := s.indexRange(cidr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := begin; i <= end; i++ {
		if s.used.Bit(i) == 0 {
			s.used.SetBit(&s.used, i, 1)
			s.allocated++
		}
	}
	return nil
}

// Release frees every node CIDR overlapping cidr. Errors: cidr outside the cluster CIDR.
func (s *CidrSet) Release(cidr *net.IPNet) error {
	begin, end, err := s.indexRange(cidr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := begin; i <= end; i++ {
		if s.used.Bit(i) == 1 {
			s.used.SetBit(&s.used, i, 0)
			s.allocated--
		}
	}
	return nil
}

// Contains is whether cidr lies in the cluster CIDR, same IP family.
func (s *CidrSet) Contains(cidr *net.IPNet) bool {
	_, bits := cidr.Mask.Size()
	return bits == s.clusterBits && s.clusterCIDR.Contains(cidr.IP)
}

// indexRange is the first and last node CIDR index cidr overlaps.
func (s *CidrSet) indexRange(cidr *net.IPNet) (int, int, error) {
	if !s.Contains(cidr) {
		return 0, 0, fmt.Errorf("CIDR %s is outside the cluster CIDR %s", cidr, s.clusterCIDR)
	}
	ones, _ := cidr.Mask.Size()
	first := s.offset(cidr.IP.Mask(cidr.Mask))
	if ones >= s.nodeMaskSize {
		return first, first, nil
	}
	n := 1 << (s.nodeMaskSize - ones)
	return first, min(first+n-1, s.maxCIDRs-1), nil
}

// offset is the index of the node CIDR holding ip.
func (s *CidrSet) offset(ip net.IP) int {
	shift := uint(s.clusterBits - s.nodeMaskSize)
	d := new(big.Int).Sub(ipToInt(ip, s.clusterBits), ipToInt(s.clusterCIDR.IP, s.clusterBits))
	return int(d.Rsh(d, shift).Int64())
}

func (s *CidrSet) indexToCIDR(i int) *net.IPNet {
	shift := uint(s.clusterBits - s.nodeMaskSize)
	v := new(big.Int).Add(ipToInt(s.clusterCIDR.IP, s.clusterBits), new(big.Int).Lsh(big.NewInt(int64(i)), shift))
	return &net.IPNet{IP: intToIP(v, s.clusterBits), Mask: net.CIDRMask(s.nodeMaskSize, s.clusterBits)}
}

func ipToInt(ip net.IP, bits int) *big.Int {
	if bits == 32 {
		ip = ip.To4()
	} else {
		ip = ip.To16()
	}
	return new(big.Int).SetBytes(ip)
}

func intToIP(v *big.Int, bits int) net.IP {
	b := v.Bytes()
	ip := make(net.IP, bits/8)
	copy(ip[len(ip)-len(b):], b)
	return ip
}
