package kubernetesservice_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/apiserver/controller/kubernetesservice"
	"skiff.dev/services/controlplanetest"
)

// advertise configures an apiserver of the test: its advertised address (a documentation
// address: Endpoints may not hold loopback ones), a short reconcile interval and its
// lease's TTL.
func advertise(ip string, ttl time.Duration) func(*apiserver.Config) {
	return func(cfg *apiserver.Config) {
		cfg.AdvertiseAddress = net.ParseIP(ip)
		cfg.EndpointReconcilerInterval = 500 * time.Millisecond
		cfg.MasterEndpointReconcileTTL = ttl
	}
}

// addresses returns the IPs the kubernetes Endpoints and EndpointSlice list, and the
// Endpoints' port.
func addresses(ctx context.Context, t *testing.T, cs kubernetes.Interface) (endpoints, slice []string, port int32) {
	t.Helper()
	ep, err := cs.CoreV1().Endpoints("default").Get(ctx, kubernetesservice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Endpoints: %v", err)
	}
	for _, subset := range ep.Subsets {
		for _, a := range subset.Addresses {
			endpoints = append(endpoints, a.IP)
		}
		if len(subset.Ports) == 1 {
			port = subset.Ports[0].Port
		}
	}
	es, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, kubernetesservice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get EndpointSlice: %v", err)
	}
	for _, e := range es.Endpoints {
		slice = append(slice, e.Addresses...)
	}
	return endpoints, slice, port
}

// leaseKeys returns the keys under /registry/masterleases/.
func leaseKeys(ctx context.Context, t *testing.T, etcd *clientv3.Client) []string {
	t.Helper()
	resp, err := etcd.Get(ctx, kubernetesservice.LeasePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), kubernetesservice.LeasePrefix))
	}
	return keys
}

// Three apiservers over one etcd, as kubeadm's stacked control plane runs them: the
// kubernetes Service's endpoints list each; one stopped gracefully leaves them at once;
// one that dies without a word leaves them once its lease has expired.
func TestEndpointsFollowTheLiveAPIServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := controlplanetest.StartServerWithoutControllers(t, advertise("192.0.2.1", 0))
	graceful := srv.StartPeer("127.0.0.2", advertise("192.0.2.2", 0))
	crashing := srv.StartPeer("127.0.0.3", advertise("192.0.2.3", 10*time.Second))
	// An apiserver with --endpoint-reconciler-type=none leaves the endpoints to the others.
	bystander := srv.StartPeer("127.0.0.4", advertise("192.0.2.4", 0), func(cfg *apiserver.Config) {
		cfg.EndpointReconcilerType = kubernetesservice.NoneEndpointReconcilerType
	})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := srv.Etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	wantPort, _ := strconv.Atoi(port)

	waitFor := func(want []string, within time.Duration) {
		t.Helper()
		var ep, slice []string
		var got int32
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			ep, slice, got = addresses(ctx, t, cs)
			return slices.Equal(ep, want) && slices.Equal(slice, want), nil
		})
		if err != nil {
			t.Fatalf("Endpoints %v, EndpointSlice %v; want both %v", ep, slice, want)
		}
		if got != int32(wantPort) {
			t.Fatalf("Endpoints port %d, want the apiservers' %d", got, wantPort)
		}
	}

	all := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}
	waitFor(all, 30*time.Second)
	if keys := leaseKeys(ctx, t, etcd); !slices.Equal(keys, all) {
		t.Fatalf("leases %v, want %v", keys, all)
	}

	// A graceful stop deletes the lease and rewrites the endpoints before it returns.
	graceful.Stop()
	ep, slice, _ := addresses(ctx, t, cs)
	if want := []string{"192.0.2.1", "192.0.2.3"}; !slices.Equal(ep, want) || !slices.Equal(slice, want) {
		t.Fatalf("right after a graceful stop: Endpoints %v, EndpointSlice %v; want both %v", ep, slice, want)
	}
	if keys := leaseKeys(ctx, t, etcd); slices.Contains(keys, "192.0.2.2") {
		t.Fatalf("leases %v still hold the stopped apiserver's", keys)
	}

	// Cut off etcd, the crashing apiserver cannot remove anything as it stops: its lease
	// stays until it expires, and a live apiserver's reconcile then drops its address.
	if err := crashing.Etcd.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	crashing.Stop()
	t.Logf("the crashing apiserver stopped in %v", time.Since(start))
	if keys := leaseKeys(ctx, t, etcd); !slices.Contains(keys, "192.0.2.3") {
		t.Fatalf("leases %v: the crashed apiserver's went before its TTL", keys)
	}
	waitFor([]string{"192.0.2.1"}, 30*time.Second)
	if keys := leaseKeys(ctx, t, etcd); !slices.Equal(keys, []string{"192.0.2.1"}) {
		t.Fatalf("leases %v, want only the live apiserver's", keys)
	}

	// The last apiserver's graceful stop keeps its address: the endpoints never go empty.
	srv.StopAPIServer()
	other, err := kubernetes.NewForConfig(bystander.Config)
	if err != nil {
		t.Fatal(err)
	}
	ep, slice, _ = addresses(ctx, t, other)
	if want := []string{"192.0.2.1"}; !slices.Equal(ep, want) || !slices.Equal(slice, want) {
		t.Fatalf("after the last apiserver stopped: Endpoints %v, EndpointSlice %v; want both %v", ep, slice, want)
	}
}
