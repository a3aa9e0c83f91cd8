package endpointslicemirroring

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestRepackSubsets checks kube's RepackSubsets rules: ports with the same addresses
// merge, an address listed twice appears once, not ready wins per port, and a subset
// without ports keeps its addresses.
func TestRepackSubsets(t *testing.T) {
	a := corev1.EndpointAddress{IP: "10.0.0.1"}
	b := corev1.EndpointAddress{IP: "10.0.0.2"}
	p80 := corev1.EndpointPort{Name: "a", Port: 80, Protocol: corev1.ProtocolTCP}
	p81 := corev1.EndpointPort{Name: "b", Port: 81, Protocol: corev1.ProtocolTCP}
	for _, tc := range []struct {
		name string
		in   []corev1.EndpointSubset
		want []corev1.EndpointSubset
	}{
		{"same addresses merge",
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}, {Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p81}}},
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80, p81}}}},
		{"duplicates collapse, sorted",
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{b, a, b}, Ports: []corev1.EndpointPort{p80}}},
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a, b}, Ports: []corev1.EndpointPort{p80}}}},
		{"not ready wins",
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}, {NotReadyAddresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}},
			[]corev1.EndpointSubset{{NotReadyAddresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}}},
		{"different addresses stay apart",
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}, {Addresses: []corev1.EndpointAddress{b}, Ports: []corev1.EndpointPort{p81}}},
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}, Ports: []corev1.EndpointPort{p80}}, {Addresses: []corev1.EndpointAddress{b}, Ports: []corev1.EndpointPort{p81}}}},
		{"no ports",
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}}},
			[]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := repackSubsets(tc.in); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("repackSubsets = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDesiredLimitAndInvalid: at most MaxEndpointsPerSubset addresses per subset, ready
// ones first (after repacking sorts them); an address that is no IP is counted and left
// out.
func TestDesiredLimitAndInvalid(t *testing.T) {
	c := &Controller{MaxEndpointsPerSubset: 2}
	ep := &corev1.Endpoints{Subsets: []corev1.EndpointSubset{{
		Addresses:         []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "1.bogus"}, {IP: "10.0.0.2"}},
		NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.0.0.3"}},
		Ports:             []corev1.EndpointPort{{Port: 80, Protocol: corev1.ProtocolTCP}},
	}}}
	groups, invalid, over := c.desired(ep)
	if invalid != 1 || over != 1 || len(groups) != 1 {
		t.Fatalf("invalid %d, over %d, groups %d", invalid, over, len(groups))
	}
	for _, g := range groups {
		if len(g.endpoints) != 2 || g.endpoints[0].Addresses[0] != "10.0.0.1" || g.endpoints[1].Addresses[0] != "10.0.0.2" {
			t.Errorf("endpoints %+v", g.endpoints)
		}
	}
}
