package endpoint

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidate(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "web", Namespace: "default"}
	port := []corev1.EndpointPort{{Port: 80, Protocol: corev1.ProtocolTCP}}
	for _, tc := range []struct {
		name    string
		subsets []corev1.EndpointSubset
		wantErr string
	}{
		{"a pod address", []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.244.0.5"}}, Ports: port}}, ""},
		{"loopback", []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "127.0.0.1"}}, Ports: port}}, "loopback"},
		{"not an IP", []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "web"}}, Ports: port}}, "must be a valid IP address"},
		{"an empty subset", []corev1.EndpointSubset{{Ports: port}}, "must specify `addresses` or `notReadyAddresses`"},
		{"two unnamed ports", []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.244.0.5"}},
			Ports: []corev1.EndpointPort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 81, Protocol: corev1.ProtocolTCP}}}}, "subsets[0].ports[0].name: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := Strategy{}.Validate(context.Background(), &corev1.Endpoints{ObjectMeta: meta, Subsets: tc.subsets})
			if tc.wantErr == "" && len(errs) != 0 || tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestFormatEndpoints(t *testing.T) {
	addrs := func(ips ...string) []corev1.EndpointAddress {
		var out []corev1.EndpointAddress
		for _, ip := range ips {
			out = append(out, corev1.EndpointAddress{IP: ip})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		subsets []corev1.EndpointSubset
		want    string
	}{
		{"none", nil, "<none>"},
		{"ip:port pairs, not-ready ones left out", []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1"), NotReadyAddresses: addrs("10.0.0.2"),
			Ports: []corev1.EndpointPort{{Port: 80}}}}, "10.0.0.1:80"},
		{"three and more", []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"),
			Ports: []corev1.EndpointPort{{Port: 80}}}}, "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 2 more..."},
		{"headless without ports", []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1")}}, "10.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatEndpoints(&corev1.Endpoints{Subsets: tc.subsets}); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrepareDefaultsPortProtocol(t *testing.T) {
	ep := &corev1.Endpoints{Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Port: 80}, {Port: 53, Protocol: corev1.ProtocolUDP}}}}}
	Strategy{}.PrepareForCreate(context.Background(), ep)
	if got := ep.Subsets[0].Ports; got[0].Protocol != corev1.ProtocolTCP || got[1].Protocol != corev1.ProtocolUDP {
		t.Fatalf("protocols after defaulting: %v", got)
	}
}
