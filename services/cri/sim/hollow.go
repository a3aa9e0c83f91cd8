package sim

import "skiff.dev/services/cri/criservice"

// NewHollow returns an empty sim Runtime that serves no streams: Exec, Attach and
// PortForward answer Unimplemented. It is the runtime of a hollow node, whose kubelet
// serves no kubelet API (as kubemark's), so it keeps no loopback listener of its own.
func NewHollow() *Runtime {
	return &Runtime{Service: criservice.New(RuntimeName, newDriver())}
}
