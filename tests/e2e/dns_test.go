package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// corednsBinary is bin/coredns as `make coredns` builds it (SKIFF_COREDNS names
// another), or "" when it is not built.
func corednsBinary(t *testing.T) string {
	path := os.Getenv("SKIFF_COREDNS")
	if path == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "bin", "coredns"))
		if err != nil {
			t.Fatal(err)
		}
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// TestClusterDNS runs the all-in-one with CoreDNS (unmodified, its kubernetes plugin
// reading skiff's apiserver as system:coredns) and resolves Services through it with
// Go's resolver pointed at the address the kube-dns Service's endpoints publish.
func TestClusterDNS(t *testing.T) {
	coredns := corednsBinary(t)
	if coredns == "" {
		t.Skip("bin/coredns is not built (make coredns)")
	}
	c := startSkiff(t, "sim", "--coredns", coredns, "--coredns-port", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	svc, err := c.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != 53 {
		t.Fatalf("kube-dns: clusterIP %s ports %+v, want 10.96.0.10 and port 53", svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	ep, err := c.Client.CoreV1().Endpoints("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || len(ep.Subsets[0].Ports) != 2 {
		t.Fatalf("kube-dns endpoints %+v, want one address and the dns and dns-tcp ports", ep.Subsets)
	}
	if ep.Subsets[0].Ports[0].Port != svc.Spec.Ports[0].TargetPort.IntVal {
		t.Errorf("endpoints port %d, Service targetPort %s", ep.Subsets[0].Ports[0].Port, svc.Spec.Ports[0].TargetPort.String())
	}
	// The endpoint is the node's address; with --bind-address 127.0.0.1 CoreDNS also
	// answers on loopback, which is where this test asks.
	server := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ep.Subsets[0].Ports[0].Port)))
	for _, network := range []string{"udp", "tcp"} {
		t.Run("resolves over "+network, func(t *testing.T) {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, server)
			}}
			lookup := func(name string) ([]string, error) {
				ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				return r.LookupHost(ctx, name)
			}
			t.Run("kube-dns.kube-system.svc.cluster.local is the Service IP", func(t *testing.T) {
				got, err := lookup("kube-dns.kube-system.svc.cluster.local.")
				if err != nil || !slices.Equal(got, []string{"10.96.0.10"}) {
					t.Fatalf("got %v, %v; want [10.96.0.10]", got, err)
				}
			})
			t.Run("kubernetes.default.svc.cluster.local is 10.96.0.1", func(t *testing.T) {
				got, err := lookup("kubernetes.default.svc.cluster.local.")
				if err != nil || !slices.Equal(got, []string{"10.96.0.1"}) {
					t.Fatalf("got %v, %v; want [10.96.0.1]", got, err)
				}
			})
			t.Run("an unknown Service is NXDOMAIN", func(t *testing.T) {
				_, err := lookup("nothing-here.default.svc.cluster.local.")
				var dnsErr *net.DNSError
				if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
					t.Fatalf("got %v, want not found", err)
				}
			})
		})
	}

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
	t.Run("a Service created now resolves to its ClusterIP", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "namespace", "dns-e2e")
		c.mustKubectl(ctx, "create", "service", "clusterip", "web", "-n", "dns-e2e", "--tcp=80:8080")
		web, err := c.Client.CoreV1().Services("dns-e2e").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A name asked before CoreDNS's watch brings the Service is NXDOMAIN, and
		// cached as such for up to 30 s (cache 30, the kubernetes plugin's ttl 30).
		eventually(t, 60*time.Second, func() (bool, string) {
			got, err := r.LookupHost(ctx, "web.dns-e2e.svc.cluster.local.")
			return err == nil && slices.Equal(got, []string{web.Spec.ClusterIP}), fmt.Sprintf("got %v, %v", got, err)
		})
		_, addrs, err := r.LookupSRV(ctx, "http", "tcp", "web.dns-e2e.svc.cluster.local.")
		if err == nil {
			t.Errorf("an unnamed port has an SRV record: %+v", addrs)
		}
	})
	t.Run("a headless Service resolves to its ready pods' IPs", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "backend", "-n", "dns-e2e", "--image=busybox", "--labels=app=backend")
		c.mustKubectl(ctx, "create", "service", "clusterip", "backend", "-n", "dns-e2e", "--clusterip=None", "--tcp=80:80")
		var podIP string
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := c.Client.CoreV1().Pods("dns-e2e").Get(ctx, "backend", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			podIP = pod.Status.PodIP
			return pod.Status.Phase == corev1.PodRunning && podIP != "", "phase " + string(pod.Status.Phase)
		})
		// Asked before the endpoints exist, the name would be NXDOMAIN for 30 s (cached).
		eventually(t, 60*time.Second, func() (bool, string) {
			list, err := c.Client.DiscoveryV1().EndpointSlices("dns-e2e").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=backend"})
			if err != nil {
				return false, err.Error()
			}
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					if len(e.Addresses) > 0 && e.Addresses[0] == podIP {
						return true, ""
					}
				}
			}
			return false, fmt.Sprintf("no endpoint %s in %+v", podIP, list.Items)
		})
		eventually(t, 60*time.Second, func() (bool, string) {
			got, err := r.LookupHost(ctx, "backend.dns-e2e.svc.cluster.local.")
			return err == nil && slices.Equal(got, []string{podIP}), fmt.Sprintf("want %s, got %v, %v", podIP, got, err)
		})
	})
	t.Run("CoreDNS reads the API as system:coredns", func(t *testing.T) {
		out := c.mustKubectl(ctx, "auth", "can-i", "watch", "endpointslices.discovery.k8s.io", "--as", "system:coredns", "-A")
		if out != "yes\n" {
			t.Errorf("system:coredns may not watch endpointslices: %q", out)
		}
		out, _ = c.kubectl(ctx, "auth", "can-i", "get", "secrets", "--as", "system:coredns", "-A")
		if out != "no\n" {
			t.Errorf("system:coredns may get secrets: %q", out)
		}
	})
}
