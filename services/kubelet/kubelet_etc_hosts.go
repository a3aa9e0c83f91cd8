package kubelet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/kubelet/container"
)

// etcHostsPath is where a container's hosts file is mounted.
const etcHostsPath = "/etc/hosts"

// nodeHostsPath is the node's hosts file, which a host-network pod's is made from.
var nodeHostsPath = "/etc/hosts"

// The first line of a kubelet-managed hosts file (kubelet_pods.go's
// managedHostsHeader and managedHostsHeaderWithHostNetwork).
const (
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// makeHostsMount writes the pod's hosts file, <podDir>/etc-hosts, and returns the mount
// of it on /etc/hosts; ok is false where the kubelet does not manage the container's
// /etc/hosts: before the sandbox has an IP, or when the container mounts a volume there
// itself. A pod on its own network gets localhost, its IPs with its host name (and
// fully qualified name under spec.subdomain) and spec.hostAliases; a host-network pod
// the node's hosts file and its host aliases. Mirrors kubelet_pods.go makeHostsMount
// and ensureHostsFile.
func (kl *Kubelet) makeHostsMount(pod *v1.Pod, c *v1.Container, podIPs []string) (m container.Mount, ok bool, err error) {
	if len(podIPs) == 0 || slices.ContainsFunc(c.VolumeMounts, func(vm v1.VolumeMount) bool { return vm.MountPath == etcHostsPath }) {
		return container.Mount{}, false, nil
	}
	var content []byte
	if pod.Spec.HostNetwork {
		if content, err = nodeHostsFileContent(nodeHostsPath, pod.Spec.HostAliases); err != nil {
			return container.Mount{}, false, fmt.Errorf("read the node's hosts file: %w", err)
		}
	} else {
		hostName, hostDomain := podHostNameAndDomain(pod, kl.clusterDomain)
		content = managedHostsFileContent(podIPs, hostName, hostDomain, pod.Spec.HostAliases)
	}
	podDir := filepath.Join(kl.rootDir, "pods", string(pod.UID))
	if err := os.MkdirAll(podDir, 0o750); err != nil {
		return container.Mount{}, false, err
	}
	path := filepath.Join(podDir, "etc-hosts")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return container.Mount{}, false, err
	}
	// os.WriteFile's mode passes through the umask; the file must be world-readable.
	if err := os.Chmod(path, 0o644); err != nil {
		return container.Mount{}, false, err
	}
	return container.Mount{Name: "k8s-managed-etc-hosts", ContainerPath: etcHostsPath, HostPath: path}, true, nil
}

// podHostNameAndDomain is the pod's host name (spec.hostname or its name, cut to 63
// characters) and, with spec.subdomain, its domain <subdomain>.<namespace>.svc.<cluster
// domain>. Mirrors GeneratePodHostNameAndDomain.
func podHostNameAndDomain(pod *v1.Pod, clusterDomain string) (hostName, hostDomain string) {
	hostName = pod.Spec.Hostname
	if hostName == "" {
		hostName = pod.Name
		if len(hostName) > 63 {
			hostName = strings.TrimRight(hostName[:63], "-.")
		}
	}
	if pod.Spec.Subdomain != "" && clusterDomain != "" {
		hostDomain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return hostName, hostDomain
}

// managedHostsFileContent is the hosts file of a pod on its own network. Mirrors
// kubelet_pods.go managedHostsFileContent.
func managedHostsFileContent(podIPs []string, hostName, hostDomain string, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if hostDomain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostName, hostDomain, hostName)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostName)
		}
	}
	b.Write(hostsEntriesFromHostAliases(aliases))
	return b.Bytes()
}

// nodeHostsFileContent is the hosts file of a host-network pod: the node's, under the
// host-network header, with the pod's host aliases. Mirrors nodeHostsFileContent.
func nodeHostsFileContent(path string, aliases []v1.HostAlias) ([]byte, error) {
	node, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(managedHostsHeaderWithHostNetwork)
	b.Write(node)
	b.Write(hostsEntriesFromHostAliases(aliases))
	return b.Bytes(), nil
}

// hostsEntriesFromHostAliases is one line per host alias, all its names on it.
func hostsEntriesFromHostAliases(aliases []v1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.Bytes()
}
