package envvars

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFromServices(t *testing.T) {
	services := []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "foo-bar"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.7", Ports: []v1.ServicePort{
			{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}, {Name: "dns-udp", Port: 53, Protocol: v1.ProtocolUDP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, Ports: []v1.ServicePort{{Port: 80}}}},
	}
	want := []v1.EnvVar{
		{Name: "FOO_BAR_SERVICE_HOST", Value: "10.96.0.7"},
		{Name: "FOO_BAR_SERVICE_PORT", Value: "80"},
		{Name: "FOO_BAR_SERVICE_PORT_HTTP", Value: "80"},
		{Name: "FOO_BAR_SERVICE_PORT_DNS_UDP", Value: "53"},
		{Name: "FOO_BAR_PORT", Value: "tcp://10.96.0.7:80"},
		{Name: "FOO_BAR_PORT_80_TCP", Value: "tcp://10.96.0.7:80"},
		{Name: "FOO_BAR_PORT_80_TCP_PROTO", Value: "tcp"},
		{Name: "FOO_BAR_PORT_80_TCP_PORT", Value: "80"},
		{Name: "FOO_BAR_PORT_80_TCP_ADDR", Value: "10.96.0.7"},
		{Name: "FOO_BAR_PORT_53_UDP", Value: "udp://10.96.0.7:53"},
		{Name: "FOO_BAR_PORT_53_UDP_PROTO", Value: "udp"},
		{Name: "FOO_BAR_PORT_53_UDP_PORT", Value: "53"},
		{Name: "FOO_BAR_PORT_53_UDP_ADDR", Value: "10.96.0.7"},
	}
	got := FromServices(services)
	if len(got) != len(want) {
		t.Fatalf("got %d variables, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("variable %d = %v, want %v", i, got[i], want[i])
		}
	}
}
