package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"sigs.k8s.io/knftables"
)

// The fixed objects of the table, with the names kube's nftables proxier gives them
// (pkg/proxy/nftables/proxier.go).
const (
	// markMasq is the packet mark that asks the masquerading chain to SNAT a packet
	// (kube's --masquerade-bit 14).
	markMasq = "0x4000"

	servicesChain          = "services"
	masqueradingChain      = "masquerading"
	markMasqChain          = "mark-for-masquerade"
	rejectChain            = "reject-chain"
	endpointsCheckChain    = "service-endpoints-check"
	clusterIPsCheckChain   = "cluster-ips-check"
	clusterIPsSet          = "cluster-ips"
	serviceIPsMap          = "service-ips"
	serviceNodePortsMap    = "service-nodeports"
	noEndpointServicesMap  = "no-endpoint-services"
	noEndpointNodePortsMap = "no-endpoint-nodeports"

	// noLocalhost keeps NodePorts off 127.0.0.0/8, as kube's nftables mode does.
	noLocalhost = "ip daddr != 127.0.0.0/8"
)

// baseChain is one of the table's hooked chains and the rule it starts with.
type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
	rule     string
}

// baseChains hook the table into netfilter: DNAT on prerouting (traffic from pods and
// other hosts) and output (traffic from this host, and from process-runtime pods that
// share its network), masquerade on postrouting, and the no-endpoints reject before
// the filter tables (priority filter - 10, as kube's).
var baseChains = []baseChain{
	{"filter-input", knftables.FilterType, knftables.InputHook, knftables.FilterPriority + "-10", "ct state new jump " + endpointsCheckChain},
	{"filter-forward", knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority + "-10", "ct state new jump " + endpointsCheckChain},
	{"filter-output", knftables.FilterType, knftables.OutputHook, knftables.FilterPriority + "-10", "ct state new jump " + endpointsCheckChain},
	{"nat-prerouting", knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority, "jump " + servicesChain},
	{"nat-output", knftables.NATType, knftables.OutputHook, knftables.DNATPriority, "jump " + servicesChain},
	{"nat-postrouting", knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority, "jump " + masqueradingChain},
}

// hashName is kube's servicePortChainNameBase hash: the first 8 characters of the
// base32 SHA-256 of s, which keeps chain names unique however the readable part reads.
func hashName(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

// portChainBase is "HASH-namespace/name/protocol/port", kube's servicePortChainNameBase.
func portChainBase(sp *servicePort) string {
	base := fmt.Sprintf("%s/%s/%s/%s", sp.name.Namespace, sp.name.Name, protocolName(sp.protocol), sp.name.Port)
	return hashName(base) + "-" + base
}

// endpointChainBase is "HASH-namespace/name/protocol/port__ip/port", kube's
// servicePortEndpointChainNameBase.
func endpointChainBase(sp *servicePort, ep endpoint) string {
	base := fmt.Sprintf("%s/%s/%s/%s__%s/%d", sp.name.Namespace, sp.name.Name, protocolName(sp.protocol), sp.name.Port, ep.ip, ep.port)
	return hashName(base) + "-" + base
}

// buildRules is kube's syncProxyRules without the diffing: it writes into tx the
// whole desired table for the given Services and endpoints. existingChains and
// existingSets are what the table holds now; those no longer wanted are flushed and
// deleted at the end of tx, while wanted ClientIP affinity sets are kept (not
// flushed) so that affinity survives a resync. node is this node's name, for the
// Local traffic policies.
func buildRules(tx *knftables.Transaction, services ServicePortMap, endpoints EndpointsMap, node string, existingChains, existingSets []string) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("skiff proxy: Service ClusterIPs, NodePorts and external IPs")})
	wantChains := map[string]bool{}
	chain := func(name string) {
		wantChains[name] = true
		tx.Add(&knftables.Chain{Name: name})
		tx.Flush(&knftables.Chain{Name: name})
	}
	rule := func(chain string, parts ...interface{}) {
		tx.Add(&knftables.Rule{Chain: chain, Rule: knftables.Concat(parts...)})
	}
	chain(markMasqChain)
	rule(markMasqChain, "meta mark set meta mark or", markMasq)
	chain(masqueradingChain)
	rule(masqueradingChain, "meta mark and", markMasq, "== 0 return")
	rule(masqueradingChain, "meta mark set meta mark xor", markMasq)
	rule(masqueradingChain, "masquerade fully-random")
	chain(rejectChain)
	// kube's reject-chain has a bare reject (ICMP port unreachable); a TCP client is
	// answered with a reset instead, which connect() reports as "connection refused"
	// wherever the client is (an ICMP error about a ClusterIP routed over loopback
	// never reaches the local socket).
	rule(rejectChain, "meta l4proto tcp reject with tcp reset")
	rule(rejectChain, "reject")

	for _, m := range []*knftables.Map{
		{Name: serviceIPsMap, Type: "ipv4_addr . inet_proto . inet_service : verdict"},
		{Name: serviceNodePortsMap, Type: "inet_proto . inet_service : verdict"},
		{Name: noEndpointServicesMap, Type: "ipv4_addr . inet_proto . inet_service : verdict"},
		{Name: noEndpointNodePortsMap, Type: "inet_proto . inet_service : verdict"},
	} {
		tx.Add(m)
		tx.Flush(m)
	}
	chain(servicesChain)
	rule(servicesChain, "ip daddr . meta l4proto . th dport vmap", "@", serviceIPsMap)
	rule(servicesChain, "fib daddr type local", noLocalhost, "meta l4proto . th dport vmap", "@", serviceNodePortsMap)
	chain(endpointsCheckChain)
	rule(endpointsCheckChain, "ip daddr . meta l4proto . th dport vmap", "@", noEndpointServicesMap)
	rule(endpointsCheckChain, "fib daddr type local", noLocalhost, "meta l4proto . th dport vmap", "@", noEndpointNodePortsMap)
	// A new connection still addressed to a ClusterIP after DNAT asked for a port or
	// protocol the Service does not have: refused, as kube's nftables mode does
	// (cluster-ips-check), rather than routed out of the node.
	wantSets := map[string]bool{clusterIPsSet: true}
	tx.Add(&knftables.Set{Name: clusterIPsSet, Type: "ipv4_addr", Comment: knftables.PtrTo("Active ClusterIPs")})
	tx.Flush(&knftables.Set{Name: clusterIPsSet})
	chain(clusterIPsCheckChain)
	rule(clusterIPsCheckChain, "ip daddr", "@", clusterIPsSet, "goto", rejectChain)
	// The hooks last, once what they jump to exists.
	for _, bc := range baseChains {
		wantChains[bc.name] = true
		tx.Add(&knftables.Chain{Name: bc.name, Type: knftables.PtrTo(bc.typ), Hook: knftables.PtrTo(bc.hook), Priority: knftables.PtrTo(bc.priority)})
		tx.Flush(&knftables.Chain{Name: bc.name})
		rule(bc.name, bc.rule)
		if bc.hook == knftables.ForwardHook || bc.hook == knftables.OutputHook && bc.typ == knftables.FilterType {
			rule(bc.name, "ct state new jump", clusterIPsCheckChain)
		}
	}

	names := make([]ServicePortName, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	sortServicePortNames(names)
	clusterIPs := map[string]bool{}
	for _, name := range names {
		sp := services[name]
		base := portChainBase(sp)
		proto := protocolName(sp.protocol)
		all := endpoints[name]
		clusterEPs := usableEndpoints(all, false, node)
		localEPs := usableEndpoints(all, true, node)

		// endpointsChain writes the chain that picks one of eps at random (after a
		// ClientIP affinity match), with one chain per endpoint, and returns its name;
		// "" when eps is empty.
		writtenEndpoints := map[string]bool{}
		endpointsChain := func(prefix string, eps []endpoint) string {
			if len(eps) == 0 {
				return ""
			}
			name := prefix + "-" + base
			var vmap, affinity []string
			for i, ep := range eps {
				epBase := endpointChainBase(sp, ep)
				epChain := "endpoint-" + epBase
				affinitySet := "affinity-" + epBase
				if sp.affinityTimeoutSeconds > 0 {
					affinity = append(affinity, knftables.Concat("ip saddr", "@", affinitySet, "goto", epChain))
				}
				vmap = append(vmap, fmt.Sprintf("%d : goto %s", i, epChain))
				if writtenEndpoints[epChain] {
					continue
				}
				writtenEndpoints[epChain] = true
				chain(epChain)
				// Hairpin: an endpoint reaching its own Service is masqueraded, or
				// the reply would bypass the DNAT.
				rule(epChain, "ip saddr", ep.ip, "jump", markMasqChain)
				if sp.affinityTimeoutSeconds > 0 {
					wantSets[affinitySet] = true
					tx.Add(&knftables.Set{Name: affinitySet, Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
						Timeout: knftables.PtrTo(secondsDuration(sp.affinityTimeoutSeconds))})
					rule(epChain, "update", "@", affinitySet, "{ ip saddr }")
				}
				rule(epChain, "meta l4proto", proto, "dnat to", ep.String())
			}
			chain(name)
			for _, r := range affinity {
				rule(name, r)
			}
			rule(name, "numgen random mod", len(eps), "vmap {", strings.Join(vmap, " , "), "}")
			return name
		}

		clusterChain := endpointsChain("service", clusterEPs)
		localChain := ""
		if sp.internalPolicyLocal || sp.externalPolicyLocal {
			localChain = endpointsChain("local", localEPs)
		}
		internal := clusterChain
		if sp.internalPolicyLocal {
			internal = localChain
		}
		if !clusterIPs[sp.clusterIP] {
			clusterIPs[sp.clusterIP] = true
			tx.Add(&knftables.Element{Set: clusterIPsSet, Key: []string{sp.clusterIP}})
		}
		if internal != "" {
			tx.Add(&knftables.Element{Map: serviceIPsMap, Key: []string{sp.clusterIP, proto, fmt.Sprint(sp.port)}, Value: []string{"goto " + internal}})
		} else {
			tx.Add(&knftables.Element{Map: noEndpointServicesMap, Key: []string{sp.clusterIP, proto, fmt.Sprint(sp.port)}, Value: []string{"goto " + rejectChain}})
		}

		if sp.nodePort == 0 && len(sp.externalIPs) == 0 {
			continue
		}
		// Traffic from outside the Service's ClusterIP: with the Cluster policy it is
		// masqueraded (the endpoint may be on another node), with Local it keeps its
		// source and goes to this node's endpoints only.
		external := ""
		if sp.externalPolicyLocal {
			external = localChain
		} else if clusterChain != "" {
			external = "external-" + base
			chain(external)
			rule(external, "jump", markMasqChain)
			rule(external, "goto", clusterChain)
		}
		for _, ip := range sp.externalIPs {
			key := []string{ip, proto, fmt.Sprint(sp.port)}
			if external != "" {
				tx.Add(&knftables.Element{Map: serviceIPsMap, Key: key, Value: []string{"goto " + external}})
			} else {
				tx.Add(&knftables.Element{Map: noEndpointServicesMap, Key: key, Value: []string{"goto " + rejectChain}})
			}
		}
		if sp.nodePort != 0 {
			key := []string{proto, fmt.Sprint(sp.nodePort)}
			if external != "" {
				tx.Add(&knftables.Element{Map: serviceNodePortsMap, Key: key, Value: []string{"goto " + external}})
			} else {
				tx.Add(&knftables.Element{Map: noEndpointNodePortsMap, Key: key, Value: []string{"goto " + rejectChain}})
			}
		}
	}

	// What the table holds and no Service wants any more: flush every stale chain first
	// (a stale chain may jump to another), then delete them, then the stale sets.
	var stale []string
	for _, name := range existingChains {
		if !wantChains[name] {
			stale = append(stale, name)
			tx.Flush(&knftables.Chain{Name: name})
		}
	}
	for _, name := range stale {
		tx.Delete(&knftables.Chain{Name: name})
	}
	for _, name := range existingSets {
		if !wantSets[name] {
			tx.Delete(&knftables.Set{Name: name})
		}
	}
}

// listExisting returns the chains and sets the table holds; none when it does not exist.
func listExisting(ctx context.Context, nft knftables.Interface) (chains, sets []string, err error) {
	if chains, err = nft.List(ctx, "chains"); err != nil && !knftables.IsNotFound(err) {
		return nil, nil, err
	}
	if sets, err = nft.List(ctx, "sets"); err != nil && !knftables.IsNotFound(err) {
		return nil, nil, err
	}
	return chains, sets, nil
}
