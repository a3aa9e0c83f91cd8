package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServiceProxy runs the all-in-one with the process runtime and its in-process
// proxy, which programs this host's nftables (its own table, removed when skiff stops).
// Three backend pods (host network: each listens on its own port, all named "http")
// sit behind one Service whose targetPort is "http": 60 requests from this host to the
// ClusterIP reach all three; a backend whose readiness probe starts failing leaves the
// EndpointSlice's ready endpoints and stops receiving requests; the NodePort answers on
// the node's address; a Service without endpoints refuses connections.
func TestServiceProxy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the proxy needs root to write nftables rules")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("the proxy needs nft:", err)
	}
	table := fmt.Sprintf("skiff-e2e-%d", os.Getpid())
	c := startSkiff(t, "process", "--proxy-table", table)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	server := filepath.Join(t.TempDir(), "namedserver")
	if out, err := exec.Command("go", "build", "-o", server, "./testdata/namedserver").CombinedOutput(); err != nil {
		t.Fatalf("build namedserver: %v\n%s", err, out)
	}
	dir := t.TempDir()
	backends := []string{"b0", "b1", "b2"}
	for _, name := range backends {
		port := freePort(t)
		ready := filepath.Join(dir, name+".ready")
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, labels: {app: named}}
spec:
  containers:
  - name: main
    image: namedserver
    command: [%[2]q, "%[3]d", %[1]q]
    ports: [{name: http, containerPort: %[3]d}]
    readinessProbe:
      exec: {command: ["test", "-f", %[4]q]}
      periodSeconds: 1
`, name, server, port, ready))
	}
	c.applyManifest(ctx, t, `apiVersion: v1
kind: Service
metadata: {name: named}
spec:
  type: NodePort
  selector: {app: named}
  ports: [{name: web, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: nobody}
spec:
  selector: {app: nobody}
  ports: [{port: 80}]
`)
	svc, err := c.Client.CoreV1().Services("default").Get(ctx, "named", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterAddr := net.JoinHostPort(svc.Spec.ClusterIP, "80")

	// readyEndpoints is how many ready endpoints the Service's slices list.
	readyEndpoints := func() (int, string) {
		slices, err := c.Client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=named"})
		if err != nil {
			return 0, err.Error()
		}
		n, desc := 0, ""
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				r := e.Conditions.Ready == nil || *e.Conditions.Ready
				if r {
					n++
				}
				desc += fmt.Sprintf("%v ready=%v ports=%v; ", e.Addresses, r, len(s.Ports))
			}
		}
		return n, desc
	}
	eventually(t, 90*time.Second, func() (bool, string) {
		n, desc := readyEndpoints()
		return n == 3, desc
	})

	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	// hits sends n requests to addr, one connection each, and counts the answers by backend.
	hits := func(addr string, n int) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			resp, err := client.Get("http://" + addr + "/")
			if err != nil {
				return seen, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return seen, err
			}
			seen[string(body)]++
		}
		return seen, nil
	}
	// until retries hits until seen has exactly want's backends (rules follow the
	// EndpointSlices within a sync).
	until := func(addr string, want ...string) map[string]int {
		t.Helper()
		var last map[string]int
		var lastErr error
		eventually(t, 30*time.Second, func() (bool, string) {
			last, lastErr = hits(addr, 60)
			if lastErr != nil || len(last) != len(want) {
				return false, fmt.Sprintf("%v, %v", last, lastErr)
			}
			for _, w := range want {
				if last[w] == 0 {
					return false, fmt.Sprint(last)
				}
			}
			return true, ""
		})
		return last
	}

	t.Run("60 requests to the ClusterIP reach all three backends", func(t *testing.T) {
		t.Logf("%s: %v", clusterAddr, until(clusterAddr, backends...))
	})

	t.Run("an unready backend leaves the EndpointSlice and gets no more requests", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "b1.ready")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, func() (bool, string) {
			n, desc := readyEndpoints()
			return n == 2, desc
		})
		until(clusterAddr, "b0", "b2")
		// And stays out: a second round never reaches it.
		seen, err := hits(clusterAddr, 60)
		if err != nil || seen["b1"] != 0 {
			t.Errorf("after b1 turned unready: %v, %v", seen, err)
		}
	})

	t.Run("the NodePort answers on the node's address", func(t *testing.T) {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "b0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A process-runtime pod's IP is the host's own (non-loopback) address, where
		// NodePorts answer; 127.0.0.0/8 is left out, as kube's nftables mode does.
		nodeAddr := net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))
		until(nodeAddr, "b0", "b2")
	})

	t.Run("a Service without endpoints refuses connections", func(t *testing.T) {
		nobody, err := c.Client.CoreV1().Services("default").Get(ctx, "nobody", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() (bool, string) {
			_, err := net.DialTimeout("tcp", net.JoinHostPort(nobody.Spec.ClusterIP, "80"), 2*time.Second)
			return err != nil && strings.Contains(err.Error(), "connection refused"), fmt.Sprint(err)
		})
	})

	t.Run("skiff's stop removes the proxy's table", func(t *testing.T) {
		c.Stop()
		if out, err := exec.Command("nft", "list", "table", "ip", table).CombinedOutput(); err == nil {
			t.Errorf("table %s outlived skiff:\n%s", table, out)
		}
	})
}
