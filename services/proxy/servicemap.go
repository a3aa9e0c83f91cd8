package proxy

import (
	"fmt"
	"net"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServicePortName names one port of one Service, as kube's proxy.ServicePortName:
// namespace/name, the port's name ("" for a lone unnamed port) and its protocol.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol corev1.Protocol
}

// String is "namespace/name:port" (kube's form), or "namespace/name" for an unnamed port.
func (s ServicePortName) String() string {
	if s.Port == "" {
		return s.NamespacedName.String()
	}
	return s.NamespacedName.String() + ":" + s.Port
}

// servicePort is what the rules need of one Service port (kube's
// proxy.BaseServicePortInfo): its ClusterIP and port, NodePort (0: none), external
// IPs, ClientIP affinity timeout (0: no affinity) and traffic policies.
type servicePort struct {
	name                   ServicePortName
	clusterIP              string
	port                   int32
	protocol               corev1.Protocol
	nodePort               int32
	externalIPs            []string
	affinityTimeoutSeconds int32
	internalPolicyLocal    bool
	externalPolicyLocal    bool
}

// endpoint is one backend of a Service port (kube's proxy.BaseEndpointInfo): an IPv4
// address and port with the EndpointSlice's conditions and node.
type endpoint struct {
	ip          string
	port        int32
	ready       bool
	serving     bool
	terminating bool
	nodeName    string
}

// String is "ip:port".
func (e endpoint) String() string { return net.JoinHostPort(e.ip, fmt.Sprint(e.port)) }

// ServicePortMap is every proxied Service port (kube's proxy.ServicePortMap).
type ServicePortMap map[ServicePortName]*servicePort

// EndpointsMap is every Service port's endpoints, sorted by address (kube's
// proxy.EndpointsMap).
type EndpointsMap map[ServicePortName][]endpoint

// buildServicePortMap is kube's ServiceChangeTracker folded into one pass: kube-proxy
// keeps the map up to date from each watch event; skiff's proxy rebuilds it from the
// informer cache at every sync, which gives the same map. Services without a ClusterIP
// (headless), ExternalName Services and non-IPv4 ClusterIPs are not proxied, as in kube.
func buildServicePortMap(services []*corev1.Service) ServicePortMap {
	m := ServicePortMap{}
	for _, svc := range services {
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		ip := net.ParseIP(svc.Spec.ClusterIP)
		if ip == nil || ip.To4() == nil {
			continue // "" or None (headless), or an IPv6 address this IPv4 proxy leaves
		}
		var timeout int32
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			timeout = corev1.DefaultClientIPServiceAffinitySeconds
			if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
				timeout = *c.ClientIP.TimeoutSeconds
			}
		}
		var externalIPs []string
		for _, e := range svc.Spec.ExternalIPs {
			if ip := net.ParseIP(e); ip != nil && ip.To4() != nil {
				externalIPs = append(externalIPs, ip.String())
			}
		}
		for _, p := range svc.Spec.Ports {
			protocol := p.Protocol
			if protocol == "" {
				protocol = corev1.ProtocolTCP
			}
			name := ServicePortName{NamespacedName: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, Port: p.Name, Protocol: protocol}
			sp := &servicePort{
				name:                   name,
				clusterIP:              ip.String(),
				port:                   p.Port,
				protocol:               protocol,
				externalIPs:            externalIPs,
				affinityTimeoutSeconds: timeout,
				internalPolicyLocal:    svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
				externalPolicyLocal:    svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
			}
			if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				sp.nodePort = p.NodePort
			}
			m[name] = sp
		}
	}
	return m
}

// buildEndpointsMap is kube's EndpointsChangeTracker (and its
// endpointSliceCache) folded into one pass over the IPv4 EndpointSlices: each slice
// port's endpoints, keyed by the Service named in the slice's
// kubernetes.io/service-name label, merged across slices and de-duplicated by
// address (a ready copy wins). An endpoint's conditions are read as kube reads them: a
// missing ready condition means ready, a missing serving condition means what ready
// says, a missing terminating condition means not terminating.
func buildEndpointsMap(slices []*discoveryv1.EndpointSlice) EndpointsMap {
	byKey := map[ServicePortName]map[string]endpoint{}
	for _, slice := range slices {
		svcName := slice.Labels[discoveryv1.LabelServiceName]
		if svcName == "" || slice.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, p := range slice.Ports {
			if p.Port == nil {
				continue
			}
			name := ServicePortName{NamespacedName: types.NamespacedName{Namespace: slice.Namespace, Name: svcName}, Protocol: corev1.ProtocolTCP}
			if p.Name != nil {
				name.Port = *p.Name
			}
			if p.Protocol != nil {
				name.Protocol = *p.Protocol
			}
			for _, ep := range slice.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				ip := net.ParseIP(ep.Addresses[0])
				if ip == nil || ip.To4() == nil {
					continue
				}
				e := endpoint{ip: ip.String(), port: *p.Port, ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready}
				e.serving = e.ready
				if ep.Conditions.Serving != nil {
					e.serving = *ep.Conditions.Serving
				}
				e.terminating = ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
				if ep.NodeName != nil {
					e.nodeName = *ep.NodeName
				}
				if byKey[name] == nil {
					byKey[name] = map[string]endpoint{}
				}
				if old, ok := byKey[name][e.String()]; ok && old.ready {
					continue
				}
				byKey[name][e.String()] = e
			}
		}
	}
	m := EndpointsMap{}
	for name, eps := range byKey {
		list := make([]endpoint, 0, len(eps))
		for _, e := range eps {
			list = append(list, e)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].String() < list[j].String() })
		m[name] = list
	}
	return m
}

// usableEndpoints is kube's topology.CategorizeEndpoints for one traffic policy: the
// ready endpoints (those on node only, when local); when there are none, the serving
// and terminating ones, so a rolling update drains instead of refusing
// (ProxyTerminatingEndpoints).
func usableEndpoints(eps []endpoint, local bool, node string) []endpoint {
	var ready, terminating []endpoint
	for _, e := range eps {
		if local && e.nodeName != node {
			continue
		}
		switch {
		case e.ready:
			ready = append(ready, e)
		case e.serving && e.terminating:
			terminating = append(terminating, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return terminating
}

// protocolName is the nft name of a Service protocol: tcp, udp or sctp.
func protocolName(p corev1.Protocol) string { return strings.ToLower(string(p)) }
