package compose

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestComposeTunnel brings the stack up with one kubelet on the default network and
// kubelet-edge on the edge network (compose.yaml's profile edge), which exec-proxy is
// not on: exec-proxy cannot dial kubelet-edge's address, and kubelet-edge reaches
// exec-proxy's tunnel port only through tunnel-gateway's one-way relay. kubectl exec and
// kubectl logs on a pod of the edge node still work: exec-proxy reaches its kubelet API
// through the node-initiated tunnel, also after exec-proxy restarts.
func TestComposeTunnel(t *testing.T) {
	if os.Getenv("SKIFF_COMPOSE_TEST") != "1" {
		t.Skip("the compose suite runs with SKIFF_COMPOSE_TEST=1 (make test-compose)")
	}
	s := newStack(t)
	// Every compose command of this project, its teardown included, takes the edge
	// profile's services in.
	s.Env = append(s.Env, "COMPOSE_PROFILES=edge")
	e := &edge{stack: s}

	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Up", func(t *testing.T) { s.up(t, 1) }},
		{"NodesReady", func(t *testing.T) { s.checkNodeCertificates(t, s.waitReadyNodes(t, 2)) }},
		{"ExecProxyCannotDialTheEdgeNode", e.testUnreachable},
		{"ExecAndLogsThroughTheTunnel", e.testExecAndLogs},
		{"TunnelComesBackAfterExecProxyRestarts", e.testExecProxyRestart},
		{"DownLeavesNothing", s.testDown},
	}
	for _, step := range steps {
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
	}
}

// edge is TestComposeTunnel's state: the edge node and its address.
type edge struct {
	*stack
	node   string // the Node kubelet-edge registered
	nodeIP string // its InternalIP, on the edge network
}

// container is the ID of service's (first) container.
func (e *edge) container(t *testing.T, service string) string {
	t.Helper()
	out, err := e.composeOutput(e.ctx, "ps", "-q", service)
	if err != nil {
		t.Fatalf("compose ps -q %s: %v\n%s", service, err, out)
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		t.Fatalf("no container of service %s", service)
	}
	return ids[len(ids)-1]
}

// probeFrom runs deploy/probe inside container: a GET of url within 2 seconds.
func probeFrom(ctx context.Context, container, url string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", container, "/usr/local/bin/probe", url).CombinedOutput()
	return string(out), err
}

// testUnreachable finds the edge node and shows that exec-proxy has no way to it: the
// same probe that reaches the default-network kubelet's API from exec-proxy's container
// cannot connect to the edge kubelet's.
func (e *edge) testUnreachable(t *testing.T) {
	edgeIPs, err := exec.CommandContext(e.ctx, "docker", "inspect", "-f",
		"{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", e.container(t, "kubelet-edge")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if ips := strings.Fields(string(edgeIPs)); len(ips) != 1 {
		t.Fatalf("kubelet-edge is on %d networks (%v), want only edge", len(ips), ips)
	} else {
		e.nodeIP = ips[0]
	}
	nodes, err := e.client.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var directIP string
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if a.Address == e.nodeIP {
				e.node = n.Name
			} else {
				directIP = a.Address
			}
		}
	}
	if e.node == "" || directIP == "" {
		t.Fatalf("want one node at kubelet-edge's address %s and one elsewhere: %v", e.nodeIP, nodes.Items)
	}
	execProxy := e.container(t, "exec-proxy")
	if out, err := probeFrom(e.ctx, execProxy, "https://"+directIP+":10250/healthz"); err != nil {
		t.Fatalf("exec-proxy cannot reach the default network's kubelet API either: %v\n%s", err, out)
	}
	out, err := probeFrom(e.ctx, execProxy, "https://"+e.nodeIP+":10250/healthz")
	if err == nil {
		t.Fatalf("exec-proxy reached the edge kubelet's API at %s directly: the edge network is not isolated", e.nodeIP)
	}
	t.Logf("exec-proxy → edge node %s (%s): %s", e.node, e.nodeIP, strings.TrimSpace(out))
}

// edgePod is a pod bound to the edge node.
func edgePod(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: edge
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, "echo started on the edge; exec sleep 3600"]
`, node)
}

// testExecAndLogs runs a pod on the edge node, then kubectl exec (with stdin) and
// kubectl logs on it, and checks exec-proxy holds the node's tunnel.
func (e *edge) testExecAndLogs(t *testing.T) {
	if out, err := e.kubectl(e.ctx, edgePod(e.node), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e.eventually(t, 3*time.Minute, "pod edge Running", func(ctx context.Context) error {
		p, err := e.client.CoreV1().Pods("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	logs, _ := e.composeOutput(e.ctx, "logs", "--no-color", "exec-proxy")
	connected := false
	for _, line := range strings.Split(logs, "\n") {
		connected = connected || (strings.Contains(line, "tunnel connected") && strings.Contains(line, e.node))
	}
	if !connected {
		t.Errorf("exec-proxy's log does not show node %s's tunnel connected:\n%s", e.node, logs)
	}
	e.execAndLogs(t)
}

// execAndLogs checks kubectl exec, exec with stdin, and logs of pod edge.
func (e *edge) execAndLogs(t *testing.T) {
	t.Helper()
	out, err := e.kubectl(e.ctx, "", "exec", "edge", "--", "echo", "hello through the tunnel")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "hello through the tunnel" {
		t.Errorf("kubectl exec printed %q", out)
	}
	out, err = e.kubectl(e.ctx, "stdin crosses too\n", "exec", "-i", "edge", "--", "cat")
	if err != nil || out != "stdin crosses too\n" {
		t.Errorf("kubectl exec -i cat: %q, %v", out, err)
	}
	out, err = e.kubectl(e.ctx, "", "logs", "edge")
	if err != nil || !strings.Contains(out, "started on the edge") {
		t.Errorf("kubectl logs: %q, %v", out, err)
	}
}

// testExecProxyRestart restarts exec-proxy: the agent dials its tunnel again (with
// backoff) and exec and logs work as before.
func (e *edge) testExecProxyRestart(t *testing.T) {
	e.composeRun(t, "restart", "exec-proxy")
	e.eventually(t, 2*time.Minute, "kubectl exec through the tunnel after exec-proxy's restart", func(ctx context.Context) error {
		_, err := e.kubectl(ctx, "", "exec", "edge", "--", "true")
		return err
	})
	e.execAndLogs(t)
}
