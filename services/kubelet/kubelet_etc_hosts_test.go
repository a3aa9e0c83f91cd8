package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMakeHostsMount pins the kubelet-managed /etc/hosts as kube's kubelet writes it
// (Kubernetes' conformance test "should test kubelet managed /etc/hosts file" reads
// it): when it is mounted, and what it holds.
func TestMakeHostsMount(t *testing.T) {
	nodeHosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1\tlocalhost\n10.1.1.1\tthe-node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { nodeHostsPath = old }(nodeHostsPath)
	nodeHostsPath = nodeHosts

	pod := func(mutate func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1"},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	aliases := []v1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"foo", "bar"}}}
	tests := []struct {
		name   string
		pod    *v1.Pod
		podIPs []string
		want   string // "" : no mount
	}{
		{"no pod IP yet: not mounted", pod(nil), nil, ""},
		{"the container mounts its own /etc/hosts: not managed", pod(func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "h", MountPath: "/etc/hosts"}}
		}), []string{"10.244.0.5"}, ""},
		{"a pod: localhost and its IP with its name", pod(nil), []string{"10.244.0.5"}, managedHostsHeader +
			"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\n" +
			"fe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.244.0.5\tweb-0\n"},
		{"hostname and subdomain: the fully qualified name first", pod(func(p *v1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain = "db", "nodes"
		}), []string{"10.244.0.5"}, "10.244.0.5\tdb.nodes.shop.svc.cluster.local\tdb\n"},
		{"host aliases are appended", pod(func(p *v1.Pod) { p.Spec.HostAliases = aliases }), []string{"10.244.0.5"},
			"10.244.0.5\tweb-0\n\n# Entries added by HostAliases.\n10.9.9.9\tfoo\tbar\n"},
		{"host network: the node's file, and the aliases", pod(func(p *v1.Pod) { p.Spec.HostNetwork, p.Spec.HostAliases = true, aliases }),
			[]string{"10.1.1.1"}, managedHostsHeaderWithHostNetwork + "127.0.0.1\tlocalhost\n10.1.1.1\tthe-node\n\n# Entries added by HostAliases.\n10.9.9.9\tfoo\tbar\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kl := &Kubelet{rootDir: t.TempDir(), clusterDomain: "cluster.local"}
			m, ok, err := kl.makeHostsMount(tt.pod, &tt.pod.Spec.Containers[0], tt.podIPs)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if ok {
					t.Fatalf("mounted %+v; want no managed /etc/hosts", m)
				}
				return
			}
			if !ok || m.ContainerPath != "/etc/hosts" || m.ReadOnly {
				t.Fatalf("mount %+v, %v; want a writable /etc/hosts", m, ok)
			}
			data, err := os.ReadFile(m.HostPath)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(data); !strings.HasSuffix(got, tt.want) || !strings.HasPrefix(got, "# Kubernetes-managed hosts file") {
				t.Errorf("hosts file:\n%s\nwant it to end with:\n%s", got, tt.want)
			}
			if info, _ := os.Stat(m.HostPath); info.Mode().Perm() != 0o644 {
				t.Errorf("mode %v, want 0644", info.Mode().Perm())
			}
		})
	}
}
