package endpointslicemirroring

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// repackSubsets rewrites subsets into their canonical form before they are mirrored, as
// kube's RepackSubsets (k8s.io/kubernetes/pkg/api/v1/endpoints) does: an address (its IP
// and target's UID) is listed once per port, not ready for that port if any subset says
// so; ports served by the same addresses share one subset; a subset without ports keeps
// its addresses under no port. Subsets, addresses and ports come out in a stable order.
func repackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	type addrKey struct {
		ip  string
		uid types.UID
	}
	// portID is a port's value, or "" for the no-port sentinel.
	portID := func(p *corev1.EndpointPort) string {
		if p == nil {
			return ""
		}
		return fmt.Sprintf("%s\x00%d\x00%s\x00%s", p.Name, p.Port, p.Protocol, ptr.Deref(p.AppProtocol, ""))
	}
	addrs := map[addrKey]corev1.EndpointAddress{} // the first occurrence of each address
	portOf := map[string]*corev1.EndpointPort{}
	readyByPort := map[string]map[addrKey]bool{}
	var portOrder []string
	note := func(port *corev1.EndpointPort, a corev1.EndpointAddress, ready bool) {
		id := portID(port)
		if _, ok := readyByPort[id]; !ok {
			readyByPort[id] = map[addrKey]bool{}
			portOf[id] = port
			portOrder = append(portOrder, id)
		}
		k := addrKey{ip: a.IP}
		if a.TargetRef != nil {
			k.uid = a.TargetRef.UID
		}
		if _, ok := addrs[k]; !ok {
			addrs[k] = a
		}
		if wasReady, seen := readyByPort[id][k]; !seen || wasReady {
			readyByPort[id][k] = ready
		}
	}
	for i := range subsets {
		ports := make([]*corev1.EndpointPort, 0, len(subsets[i].Ports))
		for j := range subsets[i].Ports {
			ports = append(ports, &subsets[i].Ports[j])
		}
		if len(ports) == 0 {
			ports = append(ports, nil)
		}
		for _, p := range ports {
			for _, a := range subsets[i].Addresses {
				note(p, a, true)
			}
			for _, a := range subsets[i].NotReadyAddresses {
				note(p, a, false)
			}
		}
	}

	lessKey := func(a, b addrKey) bool {
		if a.ip != b.ip {
			return a.ip < b.ip
		}
		return a.uid < b.uid
	}
	// signature names a port's address set, readiness included.
	signature := func(set map[addrKey]bool) string {
		keys := make([]addrKey, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return lessKey(keys[i], keys[j]) })
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k.ip + "\x00" + string(k.uid) + "\x00")
			if set[k] {
				b.WriteString("r\x00")
			} else {
				b.WriteString("n\x00")
			}
		}
		return b.String()
	}
	type packed struct {
		set   map[addrKey]bool
		ports []corev1.EndpointPort
	}
	bySig := map[string]*packed{}
	for _, id := range portOrder {
		sig := signature(readyByPort[id])
		p := bySig[sig]
		if p == nil {
			p = &packed{set: readyByPort[id]}
			bySig[sig] = p
		}
		if port := portOf[id]; port != nil {
			p.ports = append(p.ports, *port)
		}
	}
	sigs := make([]string, 0, len(bySig))
	for sig := range bySig {
		sigs = append(sigs, sig)
	}
	sort.Strings(sigs)
	out := []corev1.EndpointSubset{}
	for _, sig := range sigs {
		p := bySig[sig]
		keys := make([]addrKey, 0, len(p.set))
		for k := range p.set {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return lessKey(keys[i], keys[j]) })
		var subset corev1.EndpointSubset
		for _, k := range keys {
			if p.set[k] {
				subset.Addresses = append(subset.Addresses, addrs[k])
			} else {
				subset.NotReadyAddresses = append(subset.NotReadyAddresses, addrs[k])
			}
		}
		subset.Ports = p.ports
		out = append(out, subset)
	}
	return out
}
