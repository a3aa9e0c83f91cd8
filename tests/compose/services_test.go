package compose

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestComposeServices: the proxy beside each of 3 kubelets makes one Service's ClusterIP
// reach backends on all 3 nodes from inside any kubelet container. The three backends
// are pods pinned one per node (spec.nodeName: skiff's scheduler has no NodePorts
// filter to spread hostPort pods), each running busybox httpd on port 8080 of its
// node's network (the process runtime), answering with its node's name.
func TestComposeServices(t *testing.T) {
	if os.Getenv("SKIFF_COMPOSE_TEST") != "1" {
		t.Skip("the compose suite runs with SKIFF_COMPOSE_TEST=1 (make test-compose)")
	}
	s := newStack(t)
	if !t.Run("Up", func(t *testing.T) { s.testUp(t) }) {
		t.FailNow()
	}
	nodes := s.waitReadyNodes(t, initialKubelets)

	var manifest strings.Builder
	for i, node := range nodes {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: web-%[1]d, labels: {app: web}}
spec:
  nodeName: %[2]s
  containers:
  - name: httpd
    image: busybox
    command: ["sh", "-c", "mkdir -p /tmp/www-%[1]d && echo %[2]s > /tmp/www-%[1]d/index.html && exec httpd -f -p 8080 -h /tmp/www-%[1]d"]
    ports: [{name: http, containerPort: 8080}]
`, i, node)
	}
	manifest.WriteString(`---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
`)
	if out, err := s.kubectl(s.ctx, manifest.String(), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	svc, err := s.client.CoreV1().Services("default").Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.eventually(t, 2*time.Minute, "3 ready endpoints", func(ctx context.Context) error {
		ep, err := s.client.CoreV1().Endpoints("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, sub := range ep.Subsets {
			n += len(sub.Addresses)
		}
		if n != len(nodes) {
			return fmt.Errorf("%d ready addresses: %+v", n, ep.Subsets)
		}
		return nil
	})

	out, err := exec.CommandContext(s.ctx, "docker", "ps", "-q", "--filter", "label=com.docker.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service=kubelet").Output()
	if err != nil {
		t.Fatal(err)
	}
	containers := strings.Fields(string(out))
	if len(containers) != len(nodes) {
		t.Fatalf("%d kubelet containers, want %d", len(containers), len(nodes))
	}
	// Runs before the stack's teardown (cleanups run last-registered first).
	t.Cleanup(func() {
		if t.Failed() {
			for _, container := range containers {
				rules, _ := exec.Command("docker", "exec", container, "nft", "list", "ruleset").CombinedOutput()
				t.Logf("nft list ruleset in %s:\n%s", container, rules)
			}
		}
	})
	// busybox's wget crashes in the static image; nc speaks HTTP/1.0 well enough.
	request := `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 ` + svc.Spec.ClusterIP + " 80"
	for _, container := range containers {
		s.eventually(t, time.Minute, "every backend through the ClusterIP from kubelet "+container, func(ctx context.Context) error {
			seen := map[string]bool{}
			for range 30 {
				out, err := exec.CommandContext(ctx, "docker", "exec", container, "sh", "-c", request).CombinedOutput()
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				if err != nil || !strings.HasPrefix(lines[0], "HTTP/1.") {
					return fmt.Errorf("%s: %v: %s", request, err, out)
				}
				seen[strings.TrimSpace(lines[len(lines)-1])] = true
			}
			var got []string
			for n := range seen {
				got = append(got, n)
			}
			sort.Strings(got)
			if strings.Join(got, ",") != strings.Join(nodes, ",") {
				return fmt.Errorf("answered by %v, want %v", got, nodes)
			}
			return nil
		})
	}
}
