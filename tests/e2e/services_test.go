package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServices drives Services with the real kubectl: the kubernetes Service, kube's
// columns for services, endpoints and endpointslices, ClusterIP and NodePort
// allocation (a requested IP in use is refused with kube's 422), expose, and 200
// concurrent `kubectl create service` calls that get 200 distinct ClusterIPs.
func TestServices(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}

	t.Run("the kubernetes Service, its Endpoints and EndpointSlice", func(t *testing.T) {
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "svc,endpointslices,ep", "-n", "default")
			return err == nil && strings.Contains(out, "endpointslice.discovery.k8s.io/kubernetes") && strings.Contains(out, "endpoints/kubernetes"), out
		})
		out := c.mustKubectl(ctx, "get", "svc", "kubernetes")
		expect(t, out, "NAME         TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)   AGE", "kubernetes   ClusterIP   10.96.0.1    <none>        443/TCP")
		expect(t, c.mustKubectl(ctx, "get", "endpointslices", "kubernetes"), "NAME         ADDRESSTYPE   PORTS", "ENDPOINTS", "IPv4")
		expect(t, c.mustKubectl(ctx, "get", "ep", "kubernetes"), "NAME         ENDPOINTS", "AGE")
	})

	t.Run("create service clusterip and nodeport with kube's columns", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "service", "clusterip", "web", "--tcp=80:8080"), "service/web created")
		expect(t, c.mustKubectl(ctx, "create", "service", "nodeport", "np", "--tcp=80:8080", "--node-port=30080"), "service/np created")
		out := c.mustKubectl(ctx, "get", "svc", "web", "np", "-o", "wide")
		expect(t, out, "NAME   TYPE        CLUSTER-IP", "EXTERNAL-IP   PORT(S)", "SELECTOR", "ClusterIP", "80/TCP", "app=web",
			"NodePort", "80:30080/TCP", "app=np")
	})

	t.Run("a requested IP in use is refused with kube's 422", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "service", "clusterip", "dns", "--clusterip=10.96.0.10", "--tcp=53:53")
		out, err := c.kubectl(ctx, "create", "service", "clusterip", "dns2", "--clusterip=10.96.0.10", "--tcp=53:53")
		if err == nil {
			t.Fatalf("a second service got 10.96.0.10:\n%s", out)
		}
		// kubectl create service wraps the server's message in "error: failed to create
		// ClusterIP service: ".
		expect(t, out, `Service "dns2" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`)
		out, err = c.kubectl(ctx, "create", "service", "nodeport", "np2", "--tcp=80:8080", "--node-port=30080")
		if err == nil {
			t.Fatalf("a second service got node port 30080:\n%s", out)
		}
		expect(t, out, `spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`)
	})

	t.Run("expose a pod; a LoadBalancer is pending", func(t *testing.T) {
		c.mustKubectl(ctx, "run", "hello", "--image=busybox", "--port=8080", "--labels=app=hello")
		expect(t, c.mustKubectl(ctx, "expose", "pod", "hello", "--port=80", "--target-port=8080", "--name=hello"), "service/hello exposed")
		expect(t, c.mustKubectl(ctx, "get", "svc", "hello", "-o", "wide"), "80/TCP", "app=hello")
		c.mustKubectl(ctx, "expose", "pod", "hello", "--port=80", "--type=LoadBalancer", "--name=hello-lb")
		expect(t, c.mustKubectl(ctx, "get", "svc", "hello-lb"), "LoadBalancer", "<pending>", "80:3")
	})

	// 200 kubectl processes, 25 at a time (2 shared cores: all 200 at once only measures
	// the scheduler of the host); the creates still race on the same allocator key.
	t.Run("200 concurrent kubectl create service calls get distinct ClusterIPs", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "namespace", "many")
		const n, parallel = 200, 25
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		errs := make(chan string, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if out, err := c.kubectl(ctx, "create", "service", "clusterip", fmt.Sprintf("s%d", i), "-n", "many", "--tcp=80:8080"); err != nil {
					errs <- out
				}
			}()
		}
		wg.Wait()
		close(errs)
		for out := range errs {
			t.Errorf("kubectl create service: %s", out)
		}
		list, err := c.Client.CoreV1().Services("many").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, svc := range list.Items {
			if other, dup := seen[svc.Spec.ClusterIP]; dup {
				t.Fatalf("%s and %s share ClusterIP %s", other, svc.Name, svc.Spec.ClusterIP)
			}
			seen[svc.Spec.ClusterIP] = svc.Name
		}
		if len(seen) != n {
			t.Fatalf("%d services with distinct ClusterIPs, want %d", len(seen), n)
		}
	})
}
