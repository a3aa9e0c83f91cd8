// Package dns builds the DNS configuration (resolv.conf contents) a pod's
// sandbox gets from its dnsPolicy and dnsConfig. Mirrors kubelet's
// pkg/kubelet/network/dns.
package dns

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Limits of glibc's resolver that kubelet enforces on the merged result.
const (
	maxDNSNameservers    = 3
	maxDNSSearchPaths    = 32
	defaultClusterDomain = "cluster.local"
)

// Configurer computes pods' DNS configs for one node.
type Configurer struct {
	// ClusterDNS are the cluster DNS server IPs (kube's --cluster-dns).
	ClusterDNS []string
	// ClusterDomain is the cluster's domain; "" means cluster.local.
	ClusterDomain string
	// ResolverConfig is the node's resolv.conf path; "" means
	// /etc/resolv.conf. A missing file counts as empty.
	ResolverConfig string
}

// GetPodDNS returns the DNS config of pod's sandbox:
//   - Default (and ClusterFirst on the host network, and ClusterFirst
//     without ClusterDNS, as kubelet falls back): the node's resolv.conf;
//   - ClusterFirst / ClusterFirstWithHostNet: ClusterDNS as servers, the
//     search path <ns>.svc.<domain> svc.<domain> <domain> then the node's,
//     and ndots:5;
//   - None: nothing but spec.dnsConfig.
//
// spec.dnsConfig's servers, searches and options are then merged in.
// Errors: an unreadable resolv.conf. Mirrors Configurer.GetPodDNS.
func (c *Configurer) GetPodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	switch policy {
	case v1.DNSClusterFirstWithHostNet:
		policy = v1.DNSClusterFirst
	case v1.DNSClusterFirst:
		if pod.Spec.HostNetwork {
			policy = v1.DNSDefault
		}
	}
	if policy == v1.DNSClusterFirst && len(c.ClusterDNS) == 0 {
		policy = v1.DNSDefault
	}

	cfg := &runtimeapi.DNSConfig{}
	if policy != v1.DNSNone {
		host, err := c.hostDNS()
		if err != nil {
			return nil, err
		}
		cfg = host
	}
	if policy == v1.DNSClusterFirst {
		domain := c.ClusterDomain
		if domain == "" {
			domain = defaultClusterDomain
		}
		cfg.Servers = slices.Clone(c.ClusterDNS)
		cfg.Searches = append([]string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}, cfg.Searches...)
		cfg.Options = []string{"ndots:5"}
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = appendUnique(cfg.Servers, dc.Nameservers...)
		cfg.Searches = appendUnique(cfg.Searches, dc.Searches...)
		cfg.Options = mergeOptions(cfg.Options, dc.Options)
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
	}
	if len(cfg.Searches) > maxDNSSearchPaths {
		cfg.Searches = cfg.Searches[:maxDNSSearchPaths]
	}
	return cfg, nil
}

// hostDNS reads the node's resolv.conf: nameserver, search and options lines.
func (c *Configurer) hostDNS() (*runtimeapi.DNSConfig, error) {
	path := c.ResolverConfig
	if path == "" {
		path = "/etc/resolv.conf"
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &runtimeapi.DNSConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read resolver config: %w", err)
	}
	defer f.Close()
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = fields[1:] // the last search line wins, as in glibc
		case "options":
			cfg.Options = append(cfg.Options, fields[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read resolver config: %w", err)
	}
	return cfg, nil
}

func appendUnique(list []string, more ...string) []string {
	for _, s := range more {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// mergeOptions adds the pod's options to base; a pod option replaces the
// base option of the same name ("ndots:2" replaces "ndots:5").
func mergeOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	out := slices.Clone(base)
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil {
			opt += ":" + *o.Value
		}
		out = slices.DeleteFunc(out, func(s string) bool { return strings.SplitN(s, ":", 2)[0] == o.Name })
		out = append(out, opt)
	}
	return out
}
