package proxy

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/knftables"
)

var update = flag.Bool("update", false, "rewrite testdata/*.nft from the rules built")

func ptr[T any](v T) *T { return &v }

// service is a Service with a selector's worth of fields: type, ClusterIP and ports.
func service(ns, name string, typ corev1.ServiceType, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP, Ports: ports, SessionAffinity: corev1.ServiceAffinityNone}}
}

// epSlice is an EndpointSlice of service with one port and the given endpoints
// (address → ready).
func epSlice(ns, svc, name, portName string, port int32, eps map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(portName), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}}}
	for addr, ready := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr("node-1"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false)}})
	}
	return s
}

// testServices are the Services the golden file pins: a ClusterIP with two ready
// endpoints and one unready, a NodePort, a Service without endpoints (reject), one
// whose named port "http" resolves to a different port in each pod (two slices), and
// one with ClientIP affinity.
func testServices() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	web := service("default", "web", corev1.ServiceTypeClusterIP, "10.96.0.20", corev1.ServicePort{Name: "", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)})
	np := service("default", "np", corev1.ServiceTypeNodePort, "10.96.0.21", corev1.ServicePort{Name: "", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080})
	empty := service("default", "empty", corev1.ServiceTypeNodePort, "10.96.0.22", corev1.ServicePort{Port: 81, Protocol: corev1.ProtocolTCP, NodePort: 30081})
	named := service("apps", "named", corev1.ServiceTypeClusterIP, "10.96.0.23", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")})
	sticky := service("default", "sticky", corev1.ServiceTypeClusterIP, "10.96.0.24", corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolTCP})
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	sticky.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
	headless := service("default", "headless", corev1.ServiceTypeClusterIP, corev1.ClusterIPNone, corev1.ServicePort{Port: 80})
	return []*corev1.Service{web, np, empty, named, sticky, headless}, []*discoveryv1.EndpointSlice{
		epSlice("default", "web", "web-1", "", 8080, map[string]bool{"10.0.0.1": true, "10.0.0.2": true, "10.0.0.3": false}),
		epSlice("default", "np", "np-1", "", 8080, map[string]bool{"10.0.0.4": true}),
		epSlice("default", "empty", "empty-1", "", 8080, map[string]bool{"10.0.0.5": false}),
		epSlice("apps", "named", "named-a", "http", 8001, map[string]bool{"10.0.0.6": true}),
		epSlice("apps", "named", "named-b", "http", 8002, map[string]bool{"10.0.0.6": true}),
		epSlice("default", "sticky", "sticky-1", "", 9090, map[string]bool{"10.0.0.7": true}),
		epSlice("default", "headless", "headless-1", "", 80, map[string]bool{"10.0.0.8": true}),
	}
}

// render builds the rules into knftables' Fake (a named fake: it parses and checks the
// transaction as nft would, keeps the table in memory and dumps it as `nft list` text)
// and returns its dump.
func render(t *testing.T, fake *knftables.Fake, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) string {
	t.Helper()
	ctx := context.Background()
	chains, sets, err := listExisting(ctx, fake)
	if err != nil {
		t.Fatal(err)
	}
	tx := fake.NewTransaction()
	buildRules(tx, buildServicePortMap(svcs), buildEndpointsMap(slices), "node-1", chains, sets)
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatalf("transaction refused: %v\n%s", err, tx)
	}
	return fake.Dump()
}

// TestSyncProxyRulesGolden pins the rules built for testServices to testdata/services.nft
// (go test -run Golden -update rewrites it), and checks what each Service must get.
func TestSyncProxyRulesGolden(t *testing.T) {
	svcs, slices := testServices()
	got := render(t, knftables.NewFake(knftables.IPv4Family, DefaultTable), svcs, slices)
	golden := filepath.Join("testdata", "services.nft")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("rules differ from %s; got:\n%s", golden, got)
	}
	for _, line := range []string{
		// ClusterIP: both ready endpoints, picked at random; the unready one is left out.
		`add element ip skiff-proxy service-ips { 10.96.0.20 . tcp . 80 : goto service-`,
		`numgen random mod 2 vmap { 0 : goto endpoint-`,
		`meta l4proto tcp dnat to 10.0.0.1:8080`,
		`meta l4proto tcp dnat to 10.0.0.2:8080`,
		// NodePort: masqueraded, then the Service's endpoints.
		`add element ip skiff-proxy service-nodeports { tcp . 30080 : goto external-`,
		// No ready endpoint: ClusterIP and NodePort are rejected.
		`add element ip skiff-proxy no-endpoint-services { 10.96.0.22 . tcp . 81 : goto reject-chain }`,
		`add element ip skiff-proxy no-endpoint-nodeports { tcp . 30081 : goto reject-chain }`,
		// Named port resolved per pod: both ports of the one address.
		`meta l4proto tcp dnat to 10.0.0.6:8001`,
		`meta l4proto tcp dnat to 10.0.0.6:8002`,
		// ClientIP affinity: a timed set per endpoint, consulted before the random pick.
		`update @affinity-`,
		`timeout 60s`,
	} {
		if !strings.Contains(got, line) {
			t.Errorf("rules lack %q", line)
		}
	}
	for _, absent := range []string{"10.0.0.3", "10.0.0.5", "10.0.0.8"} {
		if strings.Contains(got, absent) {
			t.Errorf("rules route to %s, an unready or headless endpoint", absent)
		}
	}
}

// TestSyncRemovesWhatIsGone: after a Service is deleted and an endpoint turns unready,
// the next sync leaves no chain, element or affinity set of theirs, and keeps the rest.
func TestSyncRemovesWhatIsGone(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	svcs, slices := testServices()
	before := render(t, fake, svcs, slices)
	if !strings.Contains(before, "default/sticky") {
		t.Fatal("sticky not in the first rules")
	}
	// Drop "sticky" and make 10.0.0.2 unready.
	svcs = svcs[:4]
	slices[0] = epSlice("default", "web", "web-1", "", 8080, map[string]bool{"10.0.0.1": true, "10.0.0.2": false, "10.0.0.3": false})
	after := render(t, fake, svcs, slices)
	for _, gone := range []string{"default/sticky", "affinity-", "10.0.0.2", "10.96.0.24"} {
		if strings.Contains(after, gone) {
			t.Errorf("%q left after the second sync:\n%s", gone, after)
		}
	}
	for _, kept := range []string{"dnat to 10.0.0.1:8080", "numgen random mod 1 vmap", "10.96.0.21 . tcp . 80"} {
		if !strings.Contains(after, kept) {
			t.Errorf("%q lost by the second sync:\n%s", kept, after)
		}
	}
	// The same input again changes nothing.
	if again := render(t, fake, svcs, slices); again != after {
		t.Errorf("a resync with no change changed the rules:\n%s", again)
	}
}

// TestTerminatingFallback: with no ready endpoint, serving and terminating ones take the
// traffic (kube's ProxyTerminatingEndpoints); Local policies keep to this node.
func TestTerminatingFallback(t *testing.T) {
	eps := []endpoint{
		{ip: "10.0.0.1", port: 80, serving: true, terminating: true, nodeName: "node-1"},
		{ip: "10.0.0.2", port: 80, nodeName: "node-1"},
		{ip: "10.0.0.3", port: 80, ready: true, serving: true, nodeName: "node-2"},
	}
	if got := usableEndpoints(eps, false, "node-1"); len(got) != 1 || got[0].ip != "10.0.0.3" {
		t.Errorf("cluster: got %v, want the ready 10.0.0.3", got)
	}
	if got := usableEndpoints(eps, true, "node-1"); len(got) != 1 || got[0].ip != "10.0.0.1" {
		t.Errorf("local on node-1: got %v, want the serving terminating 10.0.0.1", got)
	}
	if got := usableEndpoints(eps, true, "node-3"); len(got) != 0 {
		t.Errorf("local on node-3: got %v, want none", got)
	}
}

// TestNoNFTIsNoDataplane: where nft cannot be found, New fails with ErrNoDataplane,
// which the all-in-one tells from other errors to run on without a proxy.
func TestNoNFTIsNoDataplane(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New(Config{Client: fakeclient.NewClientset()})
	if !errors.Is(err, ErrNoDataplane) {
		t.Fatalf("New without nft: %v, want ErrNoDataplane", err)
	}
	if !strings.Contains(err.Error(), "CAP_NET_ADMIN") || !strings.Contains(err.Error(), "nft") {
		t.Errorf("the error does not say what is needed: %v", err)
	}
}
