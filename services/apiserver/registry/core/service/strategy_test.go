package service

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestValidate(t *testing.T) {
	base := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	for _, tc := range []struct {
		name    string
		change  func(*corev1.Service)
		wantErr string // "" means valid
	}{
		{"a plain ClusterIP service", func(*corev1.Service) {}, ""},
		{"a named target port", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }, ""},
		{"a name that is not a DNS-1035 label", func(s *corev1.Service) { s.Name = "1web" }, "metadata.name"},
		{"no ports", func(s *corev1.Service) { s.Spec.Ports = nil }, "spec.ports: Required value"},
		{"headless without ports", func(s *corev1.Service) { s.Spec.Ports, s.Spec.ClusterIP = nil, "None" }, ""},
		{"two unnamed ports", func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 81}) }, "spec.ports[0].name: Required value"},
		{"the same port twice", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80}, {Name: "b", Port: 80}}
		}, "spec.ports[1]: Duplicate value"},
		{"a port out of range", func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }, "spec.ports[0].port"},
		{"an unknown protocol", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }, "spec.ports[0].protocol: Unsupported value"},
		{"an appProtocol", func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr.To("kubernetes.io/h2c") }, ""},
		{"an appProtocol that is not a qualified name", func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr.To("h2c over tls") },
			`spec.ports[0].appProtocol: Invalid value: "h2c over tls": name part must consist of alphanumeric characters`},
		{"a node port on a ClusterIP service", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30000 }, "may not be used when `type` is 'ClusterIP'"},
		{"an unknown type", func(s *corev1.Service) { s.Spec.Type = "Magic" }, "spec.type: Unsupported value"},
		{"an invalid clusterIP", func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0" }, "must be empty, 'None', or a valid IP address"},
		{"an IPv6 clusterIP on an IPv4 cluster", func(s *corev1.Service) { s.Spec.ClusterIP = "fd00::1" }, "expected an IPv4 value"},
		{"dual-stack on a single-stack cluster", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		}, "this cluster is not configured for dual-stack services"},
		{"IPv6 family", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }, "not configured on this cluster"},
		{"headless NodePort", func(s *corev1.Service) { s.Spec.Type, s.Spec.ClusterIP = corev1.ServiceTypeNodePort, "None" }, "may not be set to 'None' for NodePort services"},
		{"a ClientIP timeout above a day", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86401)}}
		}, "must be greater than 0 and less than 86400"},
		{"externalTrafficPolicy on a ClusterIP service", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }, "may only be set for externally-accessible services"},
		{"ExternalName without a name", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }, "spec.externalName: Required value"},
		{"ExternalName", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.com"
		}, ""},
		{"an invalid selector", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"a b": "c"} }, "spec.selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := base()
			tc.change(svc)
			s := Strategy{Family: corev1.IPv4Protocol}
			s.PrepareForCreate(context.Background(), svc)
			errs := s.Validate(context.Background(), svc)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want an error mentioning %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestTableRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  corev1.Service
		want []interface{} // TYPE CLUSTER-IP EXTERNAL-IP PORT(S) ... SELECTOR
	}{
		{"ClusterIP", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.1",
			Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}},
			[]interface{}{"ClusterIP", "10.96.0.1", "<none>", "443/TCP", "<none>"}},
		{"NodePort with two ports", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.5.5",
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}, {Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP}}}},
			[]interface{}{"NodePort", "10.96.5.5", "<none>", "80:30080/TCP,53:30053/UDP", "app=web"}},
		{"LoadBalancer pending", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.5.6",
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 31000, Protocol: corev1.ProtocolTCP}}}},
			[]interface{}{"LoadBalancer", "10.96.5.6", "<pending>", "80:31000/TCP", "<none>"}},
		{"headless", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None"}},
			[]interface{}{"ClusterIP", "None", "<none>", "<none>", "<none>"}},
		{"ExternalName", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
			[]interface{}{"ExternalName", "<none>", "example.com", "<none>", "<none>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := Strategy{}.TableRow(&tc.svc)
			got := []interface{}{row[1], row[2], row[3], row[4], row[6]}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("cells %v, want %v", got, tc.want)
				}
			}
		})
	}
}
