package dns

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestGetPodDNS(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# host\nnameserver 192.0.2.53\nsearch example.org corp\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"example.org", "corp"}, Options: []string{"edns0"}}
	two := "2"
	tests := []struct {
		name       string
		clusterDNS []string
		spec       v1.PodSpec
		want       *runtimeapi.DNSConfig
	}{
		{"Default copies the node's resolver", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSDefault}, host},
		{"ClusterFirst without cluster DNS falls back to the node's", nil, v1.PodSpec{DNSPolicy: v1.DNSClusterFirst}, host},
		{"ClusterFirst uses cluster DNS and the namespace's search path", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSClusterFirst},
			&runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.org", "corp"}, Options: []string{"ndots:5"}}},
		{"ClusterFirst on the host network is Default", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSClusterFirst, HostNetwork: true}, host},
		{"ClusterFirstWithHostNet uses cluster DNS", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSClusterFirstWithHostNet, HostNetwork: true},
			&runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.org", "corp"}, Options: []string{"ndots:5"}}},
		{"None takes only dnsConfig", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSNone, DNSConfig: &v1.PodDNSConfig{
			Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.b"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}},
			&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.b"}, Options: []string{"ndots:2"}}},
		{"dnsConfig options replace same-named ones", []string{"10.96.0.10"}, v1.PodSpec{DNSPolicy: v1.DNSClusterFirst, DNSConfig: &v1.PodDNSConfig{
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}},
			&runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.org", "corp"}, Options: []string{"ndots:2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Configurer{ClusterDNS: tt.clusterDNS, ResolverConfig: resolv}
			got, err := c.GetPodDNS(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: tt.spec})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Servers, tt.want.Servers) || !reflect.DeepEqual(got.Searches, tt.want.Searches) || !reflect.DeepEqual(got.Options, tt.want.Options) {
				t.Errorf("GetPodDNS = %v, want %v", got, tt.want)
			}
		})
	}
}
