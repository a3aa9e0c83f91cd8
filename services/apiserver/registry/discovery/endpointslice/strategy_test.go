package endpointslice

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidate(t *testing.T) {
	ports := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}}
	for _, tc := range []struct {
		name    string
		slice   discoveryv1.EndpointSlice
		wantErr string
	}{
		{"IPv4 endpoints", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Ports: ports,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}}}}, ""},
		{"an IPv6 address in an IPv4 slice", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00::5"}}}}, "must be a valid IPv4 address"},
		{"an unknown address type", discoveryv1.EndpointSlice{AddressType: "IPX"}, "addressType: Unsupported value"},
		{"an endpoint without addresses", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{}}}, "must contain at least 1 address"},
		{"a port without protocol", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http")}}}, "ports[0].protocol: Required value"},
		// kubectl create service names ports "<port>-<targetPort>": a DNS label, as
		// kube validates EndpointSlice port names (not an IANA service name).
		{"kubectl's port name 80-80", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("80-80"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}}}, ""},
		{"a port name that is no DNS label", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("Web_1"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}}}, "ports[0].name: Invalid value"},
		{"the same port name twice", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Ports: append(ports, ports...)}, "Duplicate value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.slice.ObjectMeta = metav1.ObjectMeta{Name: "web-abcde", Namespace: "default"}
			errs := Strategy{}.Validate(context.Background(), &tc.slice)
			if tc.wantErr == "" && len(errs) != 0 || tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestTableRow(t *testing.T) {
	slice := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}, {Name: ptr.To("metrics")}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2"}},
			{Addresses: []string{"10.0.0.3"}}, {Addresses: []string{"10.0.0.4"}}}}
	row := Strategy{}.TableRow(slice)
	if row[1] != "IPv4" || row[2] != "8080,metrics" || row[3] != "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..." {
		t.Fatalf("row %v", row)
	}
	if row := (Strategy{}).TableRow(&discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}); row[2] != "<unset>" || row[3] != "<unset>" {
		t.Fatalf("an empty slice: %v", row)
	}
}
