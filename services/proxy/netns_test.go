package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// inNetnsEnv marks the child test process that runs inside a fresh network namespace.
const inNetnsEnv = "SKIFF_PROXY_TEST_IN_NETNS"

// nodeIP is the address the test's namespace gives its loopback, standing for the
// node's address (NodePorts answer on it).
const nodeIP = "192.168.77.1"

// TestRealNFTablesInNetns programs the real kernel through nft, in a fresh network
// namespace holding only loopback (so the host's rules are untouched), and sends real
// TCP: a ClusterIP reaches one of two listeners (both, over enough connections), a
// NodePort on the node's address reaches the Service's listener, a Service without
// endpoints refuses the connection, an endpoint that turns unready stops receiving
// connections at the next sync, a ClientIP-affinity Service keeps a client on one
// backend, and Cleanup removes the table. The Services and
// EndpointSlices come from client-go's fake clientset (a named fake: no apiserver is
// needed to test the dataplane) through the proxy's informers.
func TestRealNFTablesInNetns(t *testing.T) {
	if os.Getenv(inNetnsEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root (a network namespace and nft)")
		}
		for _, bin := range []string{"unshare", "nft", "ip"} {
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("needs %s: %v", bin, err)
			}
		}
		// Run this test again in a new network namespace; its output is ours.
		cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestRealNFTablesInNetns$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a new network namespace:\n%s", out)
		if err != nil {
			t.Fatalf("the test in the namespace failed: %v", err)
		}
		return
	}

	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", nodeIP + "/32", "dev", "lo"},
		// ClusterIPs need a route for the output hook to see them (on a node, the default route).
		{"route", "add", "10.96.0.0/12", "dev", "lo", "src", nodeIP},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}

	// Two backends of one Service, on the node's address.
	backend := func(name string) int32 {
		l, err := net.Listen("tcp", nodeIP+":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, name)
				_ = c.Close()
			}
		}()
		return int32(l.Addr().(*net.TCPAddr).Port)
	}
	portA, portB := backend("a"), backend("b")

	svc := service("default", "web", corev1.ServiceTypeNodePort, "10.96.0.20", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080})
	empty := service("default", "empty", corev1.ServiceTypeClusterIP, "10.96.0.22", corev1.ServicePort{Port: 81, Protocol: corev1.ProtocolTCP})
	sticky := service("default", "sticky", corev1.ServiceTypeClusterIP, "10.96.0.24", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	sliceA := epSlice("default", "web", "web-a", "http", portA, map[string]bool{nodeIP: true})
	sliceB := epSlice("default", "web", "web-b", "http", portB, map[string]bool{nodeIP: true})
	stickyA := epSlice("default", "sticky", "sticky-a", "http", portA, map[string]bool{nodeIP: true})
	stickyB := epSlice("default", "sticky", "sticky-b", "http", portB, map[string]bool{nodeIP: true})
	client := fake.NewClientset(svc, empty, sticky, sliceA, sliceB, stickyA, stickyB)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := New(Config{Client: client, NodeName: "node-1", MinSyncPeriod: time.Millisecond, CleanupOnExit: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	// dial connects through the rules and returns the backend's name, or the error.
	dial := func(addr string) (string, error) {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	}
	// waitFor dials addr until the backends seen in 40 connections are exactly want.
	waitFor := func(addr string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			seen := map[string]bool{}
			var lastErr error
			for range 40 {
				name, err := dial(addr)
				if err != nil {
					lastErr = err
					continue
				}
				seen[name] = true
			}
			ok := lastErr == nil && len(seen) == len(want)
			for _, w := range want {
				ok = ok && seen[w]
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				out, _ := exec.Command("nft", "list", "ruleset").CombinedOutput()
				t.Fatalf("%s: saw %v (last error %v), want %v; ruleset:\n%s", addr, seen, lastErr, want, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	waitFor("10.96.0.20:80", "a", "b")
	waitFor(nodeIP+":30080", "a", "b")
	if _, err := dial("10.96.0.22:81"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a Service without endpoints: got %v, want connection refused", err)
	}
	// A port the Service does not have is refused too, not routed away.
	if _, err := dial("10.96.0.20:81"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a port the Service lacks: got %v, want connection refused", err)
	}
	// ClientIP affinity: once a client has reached a backend, it keeps it.
	first, err := dial("10.96.0.24:80")
	if err != nil {
		t.Fatalf("sticky Service: %v", err)
	}
	for range 30 {
		if name, err := dial("10.96.0.24:80"); err != nil || name != first {
			t.Fatalf("sticky Service: got %q, %v after %q", name, err, first)
		}
	}
	if p.Ready() != nil {
		t.Errorf("ready after syncs: %v", p.Ready())
	}

	// Backend b turns unready: the next sync takes it out.
	sliceB = epSlice("default", "web", "web-b", "http", portB, map[string]bool{nodeIP: false})
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, sliceB, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("10.96.0.20:80", "a")

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "list", "table", "ip", DefaultTable).CombinedOutput(); err == nil {
		t.Errorf("the table outlived Run with CleanupOnExit:\n%s", out)
	}
}
