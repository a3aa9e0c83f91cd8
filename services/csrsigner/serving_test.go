package csrsigner

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hosts resolves names as a static hosts table does: a name it lists has its addresses,
// any other does not exist (*net.DNSError with IsNotFound); a name listed with no
// addresses fails as an unreachable DNS server does.
type hosts map[string][]string

func (h hosts) LookupHost(_ context.Context, host string) ([]string, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{ip.String()}, nil
	}
	addrs, ok := h[host]
	switch {
	case !ok:
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	case len(addrs) == 0:
		return nil, &net.DNSError{Err: "i/o timeout", Name: host, IsTimeout: true}
	}
	return addrs, nil
}

func addresses(t corev1.NodeAddressType, values ...string) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, v := range values {
		out = append(out, corev1.NodeAddress{Type: t, Address: v})
	}
	return out
}

// TestServingPolicy: with a ServingPolicy a node's serving request is approved for its own
// names and InternalIPs only, and never for a name or IP the policy reserves, however the
// node describes itself in its status.
func TestServingPolicy(t *testing.T) {
	// Node a reports, besides its own addresses, every address it should not obtain a
	// certificate for: the approver must refuse each although the node "has" it.
	var aAddresses []corev1.NodeAddress
	aAddresses = append(aAddresses, addresses(corev1.NodeInternalIP, "10.0.0.1", "fd00::1", "127.0.0.1", "::1", "0.0.0.0", "169.254.1.1",
		"fe80::1", "224.0.0.1", "ff02::1", "10.96.0.1", "10.100.0.5", "172.18.0.2", "172.18.0.3", "192.0.2.9", "10.0.0.2")...)
	aAddresses = append(aAddresses, addresses(corev1.NodeHostName, "a.internal", "kubernetes.default.svc", "Kubernetes.Default.", "etcd", "nats",
		"exec-proxy", "apiserver", "localhost", "cp.example", "b", "b.internal", "*.a.internal", "web.default.svc", "web.default.svc.cluster.local")...)
	aAddresses = append(aAddresses, addresses(corev1.NodeInternalDNS, "a.dns.internal")...)
	aAddresses = append(aAddresses, addresses(corev1.NodeExternalIP, "203.0.113.1")...)
	aAddresses = append(aAddresses, addresses(corev1.NodeExternalDNS, "a.example.com")...)
	nodeAObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Addresses: aAddresses}}
	nodeBObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Status: corev1.NodeStatus{
		Addresses: append(addresses(corev1.NodeInternalIP, "10.0.0.2"), addresses(corev1.NodeHostName, "b.internal")...)}}
	policy := &ServingPolicy{
		ServiceCIDR:       DefaultServiceClusterIPRange,
		ControlPlaneHosts: append(DefaultControlPlaneHosts(), "cp.example", "192.0.2.9"),
		// In compose the control plane's service names resolve to their containers.
		Resolver: hosts{"apiserver": {"172.18.0.2"}, "etcd": {"172.18.0.3"}},
	}
	approver := Approver{Nodes: nodes(t, nodeAObj, nodeBObj), KubeletServing: policy}
	cases := []struct {
		name     string
		dns, ips []string
		approve  bool
		why      string // part of the message when not approved
	}{
		{name: "the node's name, Hostname, InternalDNS and InternalIPs are approved", dns: []string{"a", "a.internal", "a.dns.internal"}, ips: []string{"10.0.0.1", "fd00::1"}, approve: true},
		{name: "an IP the node does not report is refused", ips: []string{"10.0.0.7"}, why: "not one of node"},
		{name: "a name the node does not report is refused", dns: []string{"c.internal"}, why: "not one of node"},
		{name: "an ExternalIP is refused", ips: []string{"203.0.113.1"}, why: "not one of node"},
		{name: "an ExternalDNS name is refused", dns: []string{"a.example.com"}, why: "not one of node"},
		{name: "IPv4 loopback is refused", ips: []string{"127.0.0.1"}, why: "loopback"},
		{name: "IPv6 loopback is refused", ips: []string{"::1"}, why: "loopback"},
		{name: "the unspecified address is refused", ips: []string{"0.0.0.0"}, why: "unspecified"},
		{name: "an IPv4 link-local address is refused", ips: []string{"169.254.1.1"}, why: "link-local"},
		{name: "an IPv6 link-local address is refused", ips: []string{"fe80::1"}, why: "link-local"},
		{name: "an IPv4 multicast address is refused", ips: []string{"224.0.0.1"}, why: "multicast"},
		{name: "an IPv6 multicast address is refused", ips: []string{"ff02::1"}, why: "multicast"},
		{name: "the kubernetes Service's ClusterIP is refused", ips: []string{"10.96.0.1"}, why: "service cluster IP range"},
		{name: "any IP of the service cluster IP range is refused", ips: []string{"10.100.0.5"}, why: "service cluster IP range"},
		{name: "kubernetes.default.svc is refused", dns: []string{"kubernetes.default.svc"}, why: "Service's name"},
		{name: "a control-plane name in another case with a trailing dot is refused", dns: []string{"Kubernetes.Default."}, why: "control plane"},
		{name: "etcd is refused", dns: []string{"etcd"}, why: "control plane"},
		{name: "nats is refused", dns: []string{"nats"}, why: "control plane"},
		{name: "exec-proxy is refused", dns: []string{"exec-proxy"}, why: "control plane"},
		{name: "apiserver is refused", dns: []string{"apiserver"}, why: "control plane"},
		{name: "localhost is refused", dns: []string{"localhost"}, why: "control plane"},
		{name: "a control-plane name given by flag is refused", dns: []string{"cp.example"}, why: "control plane"},
		{name: "a control-plane IP given by flag is refused", ips: []string{"192.0.2.9"}, why: "control plane"},
		{name: "the IP the apiserver's name resolves to is refused", ips: []string{"172.18.0.2"}, why: "control plane (apiserver)"},
		{name: "the IP etcd's name resolves to is refused", ips: []string{"172.18.0.3"}, why: "control plane (etcd)"},
		{name: "another node's InternalIP is refused", ips: []string{"10.0.0.2"}, why: `node "b"`},
		{name: "another node's name is refused", dns: []string{"b"}, why: `node "b"`},
		{name: "another node's Hostname is refused", dns: []string{"b.internal"}, why: `node "b"`},
		{name: "a wildcard name is refused", dns: []string{"*.a.internal"}, why: "wildcard"},
		{name: "a Service's name is refused", dns: []string{"web.default.svc"}, why: "Service's name"},
		{name: "a Service's fully qualified name is refused", dns: []string{"web.default.svc.cluster.local"}, why: "Service's name"},
		{name: "one reserved SAN among the node's own refuses the request", dns: []string{"a"}, ips: []string{"10.0.0.1", "10.96.0.1"}, why: "service cluster IP range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr := csrFor(t, nodeA, certificatesv1.KubeletServingSignerName, servingUsages,
				request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: tc.dns, ips: tc.ips})
			d, err := approver.Decide(context.Background(), csr)
			if err != nil {
				t.Fatal(err)
			}
			if d.Approve != tc.approve {
				t.Fatalf("Approve = %v (%s), want %v", d.Approve, d.Message, tc.approve)
			}
			if !strings.Contains(d.Message, tc.why) {
				t.Fatalf("message %q does not say %q", d.Message, tc.why)
			}
		})
	}
}

// TestServingPolicyUnresolvedControlPlane: when a control-plane name cannot be looked up
// (not "no such host": a DNS server that does not answer), a request with IPs is not
// decided, so the controller asks again later rather than approve an IP that may be the
// control plane's.
func TestServingPolicyUnresolvedControlPlane(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{
		Addresses: append(addresses(corev1.NodeInternalIP, "10.0.0.1"), addresses(corev1.NodeHostName, "a.internal")...)}}
	approver := Approver{Nodes: nodes(t, node), KubeletServing: &ServingPolicy{
		ServiceCIDR: DefaultServiceClusterIPRange, ControlPlaneHosts: DefaultControlPlaneHosts(), Resolver: hosts{"nats": nil},
	}}
	d, err := approver.Decide(context.Background(), csrFor(t, nodeA, certificatesv1.KubeletServingSignerName, servingUsages, nodeAServing))
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || d.Approve {
		t.Fatalf("Decide = %+v, %v; want no approval and the lookup's error", d, err)
	}
	// A request naming no IP needs no lookup.
	d, err = approver.Decide(context.Background(), csrFor(t, nodeA, certificatesv1.KubeletServingSignerName, servingUsages,
		request{cn: "system:node:a", orgs: []string{NodesGroup}, dns: []string{"a.internal"}}))
	if err != nil || !d.Approve {
		t.Fatalf("Decide = %+v, %v; want approved", d, err)
	}
}

func TestDefaultControlPlaneHosts(t *testing.T) {
	got := DefaultControlPlaneHosts()
	for _, want := range []string{"kubernetes.default.svc", "10.96.0.1", "apiserver", "etcd", "nats", "exec-proxy", "localhost", "127.0.0.1", "::1"} {
		if !slices.Contains(got, want) {
			t.Errorf("DefaultControlPlaneHosts() = %v, lacks %q", got, want)
		}
	}
}
