package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPortForwardService runs `kubectl port-forward svc/NAME :PORT` against the
// all-in-one: kubectl resolves the Service to one of its running pods and the Service
// port to that pod's container port (a named targetPort through the pod's
// containerPort name), then port-forwards to the pod through apiserver → exec-proxy →
// kubelet, over WebSocket and SPDY.
func TestPortForwardService(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	server := filepath.Join(t.TempDir(), "webserver")
	if out, err := exec.Command("go", "build", "-o", server, "./testdata/webserver").CombinedOutput(); err != nil {
		t.Fatalf("build webserver: %v\n%s", err, out)
	}
	port := freePort(t)
	manifest := fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: pfweb, labels: {app: pfweb}}
spec:
  containers:
  - name: web
    image: webserver
    command: [%q, "%d"]
    ports: [{name: http, containerPort: %d}]
---
apiVersion: v1
kind: Service
metadata: {name: pfweb-named}
spec:
  selector: {app: pfweb}
  ports: [{name: web, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: pfweb-number}
spec:
  selector: {app: pfweb}
  ports: [{port: 8080, targetPort: %d}]
`, server, port, port, port)
	apply := c.kubectlCmd(ctx, nil, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	c.waitRunning(ctx, t, "pfweb")

	for _, svc := range []struct{ name, port string }{{"pfweb-named", "80"}, {"pfweb-number", "8080"}} {
		for _, tr := range transports {
			t.Run(svc.name+"/"+tr.name, func(t *testing.T) {
				pfCtx, stop := context.WithCancel(ctx)
				defer stop()
				cmd := c.kubectlCmd(pfCtx, tr.env, "port-forward", "svc/"+svc.name, ":"+svc.port)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { stop(); _ = cmd.Wait() }()
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)`).FindStringSubmatch(line)
				if m == nil {
					stop()
					_ = cmd.Wait()
					t.Fatalf("kubectl port-forward printed %q; stderr %s", line, stderr.String())
				}
				if m[2] != fmt.Sprint(port) {
					t.Errorf("forwarding to pod port %s, want the container port %d", m[2], port)
				}
				var body []byte
				eventually(t, 20*time.Second, func() (bool, string) {
					hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
					resp, err := hc.Get("http://127.0.0.1:" + m[1] + "/")
					if err != nil {
						return false, err.Error() + "; kubectl: " + stderr.String()
					}
					defer resp.Body.Close()
					body, _ = io.ReadAll(resp.Body)
					return bytes.Equal(body, []byte("hello from the pod")), string(body)
				})
			})
		}
	}
	t.Run("a Service without running pods is refused by kubectl", func(t *testing.T) {
		c.mustKubectl(ctx, "create", "service", "clusterip", "nobody", "--tcp=80:80")
		out, err := c.kubectl(ctx, "port-forward", "--pod-running-timeout=5s", "svc/nobody", ":80")
		if err == nil || !strings.Contains(out, "timed out waiting for the condition") && !strings.Contains(out, "no pods") {
			t.Errorf("port-forward to a Service without pods: %v\n%s", err, out)
		}
	})
}
