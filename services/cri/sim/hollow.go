package sim

import "skiff.dev/services/cri/criservice"

// NewHollow returns an empty sim Runtime that serves no streams: Exec, Attach and
// PortForward answer Unimplemented. It is the runtime of a hollow node, whose kubelet
// serves no kubelet API (as kubemark's), so it keeps no loopback listener of its own.
// Its network is ready at once, as kubemark's fake runtime's: a hollow node runs before
// node IPAM gives it a range, and beyond the cluster CIDR's ranges.
func NewHollow() *Runtime {
	return &Runtime{Service: criservice.New(RuntimeName, newDriver())}
}
