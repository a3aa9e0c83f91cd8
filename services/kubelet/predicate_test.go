package kubelet

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podWithPort(uid string, ip string, protocol v1.Protocol, port int32) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
			Ports: []v1.ContainerPort{{ContainerPort: 80, HostIP: ip, Protocol: protocol, HostPort: port}}}}},
	}
}

// TestAdmitHostPorts: a host port another active pod holds is refused on the same IP or
// where either binds every IP; another protocol, port or specific IP is not a conflict.
func TestAdmitHostPorts(t *testing.T) {
	held := podWithPort("held", "", "", 8080) // 0.0.0.0/TCP
	heldOnIP := podWithPort("held-ip", "10.0.0.1", v1.ProtocolTCP, 9090)
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		conflict bool
	}{
		{"same port, every IP", podWithPort("a", "", v1.ProtocolTCP, 8080), true},
		{"same port, a specific IP against every IP", podWithPort("b", "10.0.0.2", v1.ProtocolTCP, 8080), true},
		{"same port, other protocol", podWithPort("c", "", v1.ProtocolUDP, 8080), false},
		{"other port", podWithPort("d", "", v1.ProtocolTCP, 8081), false},
		{"same port on another IP", podWithPort("e", "10.0.0.2", v1.ProtocolTCP, 9090), false},
		{"same port on the same IP", podWithPort("f", "10.0.0.1", v1.ProtocolTCP, 9090), true},
		{"no host port", &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "g", UID: "g"}}, false},
	} {
		why := admitHostPorts(tc.pod, []*v1.Pod{held, heldOnIP, tc.pod})
		if (why != "") != tc.conflict {
			t.Errorf("%s: %q, want conflict %v", tc.name, why, tc.conflict)
		}
	}
}
