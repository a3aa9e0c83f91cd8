package csrsigner

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"skiff.dev/services/internal/pki"
)

// DefaultServiceClusterIPRange is the Services' cluster IP range when none is given: the
// apiserver's --service-cluster-ip-range default, kube's 10.96.0.0/12.
var DefaultServiceClusterIPRange = netip.MustParsePrefix("10.96.0.0/12")

// resolveTimeout bounds the lookups of the control-plane host names for one decision.
const resolveTimeout = 5 * time.Second

// DefaultControlPlaneHosts are the DNS names and IPs the cluster CA already vouches for as
// the control plane's: the apiserver's (pki.DefaultAPIServerHosts, kubernetes.default.svc
// and its ClusterIP among them), etcd's, NATS's and exec-proxy's serving certificate
// SANs. No kubelet-serving certificate is approved for them.
func DefaultControlPlaneHosts() []string {
	var hosts []string
	for _, list := range [][]string{pki.DefaultAPIServerHosts, pki.DefaultEtcdHosts, pki.DefaultNATSHosts, pki.DefaultExecProxyHosts} {
		for _, h := range list {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// Resolver looks a host name up, as net.Resolver.LookupHost does: the addresses it has,
// or a *net.DNSError whose IsNotFound says it has none.
type Resolver interface {
	LookupHost(ctx context.Context, host string) (addrs []string, err error)
}

// ServingPolicy is what the Approver allows in a kubelet-serving certificate it approves
// without a person. kube-controller-manager approves none; skiff, with csr-signer
// --approve-kubelet-serving, approves one whose SANs are all the node's own:
//
//   - DNS names: the node's name and its Hostname and InternalDNS addresses;
//   - IPs: its InternalIP addresses;
//
// and none of which, whatever the node reports about itself, is
//
//   - a loopback, unspecified, link-local or multicast IP;
//   - an IP in ServiceCIDR (a Service's ClusterIP, the kubernetes Service's among them);
//   - one of ControlPlaneHosts, or an IP one of its names resolves to now;
//   - a wildcard name, or a Service's DNS name (<service>.<namespace>.svc[.<domain>]);
//   - a name or IP another Node reports (its name or any of its addresses).
//
// The cluster CA signs the control plane's serving certificates too and every pod trusts
// it (kube-root-ca.crt), so a certificate for any of these would let a node impersonate
// the control plane, a Service or another node.
type ServingPolicy struct {
	// ServiceCIDR is the Services' cluster IP range (the apiserver's
	// --service-cluster-ip-range).
	ServiceCIDR netip.Prefix
	// ControlPlaneHosts are the DNS names and IPs of the control plane
	// (DefaultControlPlaneHosts and any more).
	ControlPlaneHosts []string
	// Resolver looks ControlPlaneHosts' names up at each decision, so a control-plane
	// address that changes (a container restarted) is still refused; nil means
	// net.DefaultResolver.
	Resolver Resolver
}

// refuse returns why req, a kubelet-serving request of node, may not be approved, or ""
// when it may; nodes are every Node (node among them). An error means a control-plane
// name could not be resolved (other than it not existing), so no decision is possible.
func (p *ServingPolicy) refuse(ctx context.Context, node *corev1.Node, nodes []*corev1.Node, req *x509.CertificateRequest) (string, error) {
	ownNames, ownIPs := sets.New(dnsName(node.Name)), sets.New[netip.Addr]()
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS:
			ownNames.Insert(dnsName(a.Address))
		case corev1.NodeInternalIP:
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ownIPs.Insert(ip.Unmap())
			}
		}
	}
	otherNames, otherIPs := map[string]string{}, map[netip.Addr]string{}
	for _, n := range nodes {
		if n.Name == node.Name {
			continue
		}
		otherNames[dnsName(n.Name)] = n.Name
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				otherIPs[ip.Unmap()] = n.Name
			} else {
				otherNames[dnsName(a.Address)] = n.Name
			}
		}
	}
	controlNames, controlIPs := sets.New[string](), sets.New[netip.Addr]()
	for _, h := range p.ControlPlaneHosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			controlIPs.Insert(ip.Unmap())
		} else {
			controlNames.Insert(dnsName(h))
		}
	}

	for _, raw := range req.DNSNames {
		name := dnsName(raw)
		switch {
		case !ownNames.Has(name):
			return fmt.Sprintf("DNS name %q is not one of node %q's names %v (its name, Hostname and InternalDNS addresses)", raw, node.Name, sets.List(ownNames)), nil
		case strings.Contains(name, "*"):
			return fmt.Sprintf("DNS name %q is a wildcard", raw), nil
		case isServiceName(name):
			return fmt.Sprintf("DNS name %q is a Service's name", raw), nil
		case controlNames.Has(name):
			return fmt.Sprintf("DNS name %q belongs to the control plane", raw), nil
		case otherNames[name] != "":
			return fmt.Sprintf("DNS name %q is also node %q's", raw, otherNames[name]), nil
		}
	}
	for _, netIP := range req.IPAddresses {
		ip, ok := netip.AddrFromSlice(netIP)
		if !ok {
			return fmt.Sprintf("IP address %v does not parse", netIP), nil
		}
		ip = ip.Unmap()
		switch {
		case !ownIPs.Has(ip):
			return fmt.Sprintf("IP address %s is not one of node %q's InternalIP addresses %v", ip, node.Name, sortedIPs(ownIPs)), nil
		case ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast():
			return fmt.Sprintf("IP address %s is loopback, unspecified, link-local or multicast", ip), nil
		case p.ServiceCIDR.IsValid() && p.ServiceCIDR.Contains(ip):
			return fmt.Sprintf("IP address %s is in the service cluster IP range %s", ip, p.ServiceCIDR), nil
		case controlIPs.Has(ip):
			return fmt.Sprintf("IP address %s belongs to the control plane", ip), nil
		case otherIPs[ip] != "":
			return fmt.Sprintf("IP address %s is also node %q's", ip, otherIPs[ip]), nil
		}
	}
	if len(req.IPAddresses) == 0 {
		return "", nil
	}
	// Looked up last, and only for a request with IPs that passed every other check:
	// a name resolves to different addresses over time (compose's containers).
	resolved, err := p.resolve(ctx, sets.List(controlNames))
	if err != nil {
		return fmt.Sprintf("cannot tell whether its IP addresses are the control plane's: %v", err), err
	}
	for _, netIP := range req.IPAddresses {
		ip, _ := netip.AddrFromSlice(netIP)
		if host, ok := resolved[ip.Unmap()]; ok {
			return fmt.Sprintf("IP address %s belongs to the control plane (%s)", ip.Unmap(), host), nil
		}
	}
	return "", nil
}

// resolve looks each name up and returns the addresses found, each with the name it is
// for. A name that does not exist has none; any other failure is an error.
func (p *ServingPolicy) resolve(ctx context.Context, names []string) (map[netip.Addr]string, error) {
	resolver := p.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	found := map[netip.Addr]string{}
	for _, name := range names {
		addrs, err := resolver.LookupHost(ctx, name)
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("resolving control-plane host %q: %w", name, err)
		}
		for _, a := range addrs {
			if ip, err := netip.ParseAddr(a); err == nil {
				found[ip.Unmap()] = name
			}
		}
	}
	return found, nil
}

// dnsName is name as DNS compares it: lower case, without a trailing dot.
func dnsName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// isServiceName reports whether name has the shape of a Service's cluster DNS name,
// <service>.<namespace>.svc or <service>.<namespace>.svc.<cluster domain>.
func isServiceName(name string) bool {
	labels := strings.Split(name, ".")
	return len(labels) >= 3 && labels[2] == "svc"
}

func sortedIPs(ips sets.Set[netip.Addr]) []string {
	out := make([]string, 0, ips.Len())
	for ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}
