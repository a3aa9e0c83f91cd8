package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectl runs the real kubectl's everyday commands against skiff (sim runtime) and
// checks what it prints, one named case per command.
func TestKubectl(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	manifest := filepath.Join(dir, "web.yaml")
	writeManifest := func(image string) {
		t.Helper()
		pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  containers:\n  - name: web\n    image: " + image + "\n"
		if err := os.WriteFile(manifest, []byte(pod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}

	t.Run("apply -f creates, then configures a change, then is unchanged", func(t *testing.T) {
		writeManifest("nginx:1.27")
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), "pod/web created")
		writeManifest("nginx:1.28")
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), "pod/web configured")
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), "pod/web unchanged")
		expect(t, c.mustKubectl(ctx, "get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}"), "nginx:1.28")
	})

	t.Run("wait --for=condition=Ready", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "wait", "--for=condition=Ready", "pod/web", "--timeout=60s"), "pod/web condition met")
	})

	t.Run("get as table, wide, yaml, json, jsonpath and custom-columns", func(t *testing.T) {
		table := c.mustKubectl(ctx, "get", "pods")
		expect(t, table, "NAME", "READY", "STATUS", "RESTARTS", "AGE", "web", "1/1", "Running")
		wide := c.mustKubectl(ctx, "get", "pods", "-o", "wide")
		expect(t, wide, "IP", "NODE", "NOMINATED NODE", "READINESS GATES", "e2e-sim")
		expect(t, c.mustKubectl(ctx, "get", "pod", "web", "-o", "yaml"), "kind: Pod", "name: web", "phase: Running")
		var pod struct {
			Kind   string
			Status struct{ Phase string }
		}
		if err := json.Unmarshal([]byte(c.mustKubectl(ctx, "get", "pod", "web", "-o", "json")), &pod); err != nil || pod.Kind != "Pod" || pod.Status.Phase != "Running" {
			t.Errorf("-o json: %v %+v", err, pod)
		}
		expect(t, c.mustKubectl(ctx, "get", "pods", "-o", "jsonpath={.items[*].metadata.name}"), "web")
		expect(t, c.mustKubectl(ctx, "get", "pods", "-o", "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName"), "NAME", "NODE", "web", "e2e-sim")
		expect(t, c.mustKubectl(ctx, "get", "nodes", "-o", "wide"), "INTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME", "skiff-sim://")
	})

	t.Run("describe pod and node", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "describe", "pod", "web"), "Name:", "web", "Node:", "e2e-sim", "Status:", "Running", "Containers:", "Conditions:")
		expect(t, c.mustKubectl(ctx, "describe", "node", "e2e-sim"), "Name:", "e2e-sim", "Capacity:", "Allocatable:", "Ready")
	})

	t.Run("label and annotate", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "label", "pod", "web", "tier=frontend"), "pod/web labeled")
		expect(t, c.mustKubectl(ctx, "get", "pods", "-l", "tier=frontend", "-o", "name"), "pod/web")
		expect(t, c.mustKubectl(ctx, "label", "pod", "web", "tier-"), "pod/web unlabeled")
		expect(t, c.mustKubectl(ctx, "annotate", "pod", "web", "note=hello"), "pod/web annotated")
		expect(t, c.mustKubectl(ctx, "get", "pod", "web", "-o", "jsonpath={.metadata.annotations.note}"), "hello")
	})

	t.Run("patch as strategic merge, merge and JSON patch", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "patch", "pod", "web", "-p", `{"metadata":{"labels":{"smp":"yes"}}}`), "pod/web patched")
		expect(t, c.mustKubectl(ctx, "patch", "pod", "web", "--type=merge", "-p", `{"metadata":{"labels":{"merge":"yes"}}}`), "pod/web patched")
		expect(t, c.mustKubectl(ctx, "patch", "pod", "web", "--type=json", "-p", `[{"op":"add","path":"/metadata/labels/json","value":"yes"}]`), "pod/web patched")
		expect(t, c.mustKubectl(ctx, "get", "pod", "web", "--show-labels"), "smp=yes", "merge=yes", "json=yes")
	})

	t.Run("api-resources lists what skiff serves", func(t *testing.T) {
		out := c.mustKubectl(ctx, "api-resources")
		for _, line := range []string{"pods", "po", "nodes", "no", "namespaces", "ns", "events", "ev", "leases"} {
			expect(t, out, line)
		}
	})

	t.Run("create namespace, create in it, delete it", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "namespace", "team"), "namespace/team created")
		expect(t, c.mustKubectl(ctx, "-n", "team", "run", "worker", "--image=busybox", "--restart=Never"), "pod/worker created")
		eventually(t, 60*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "-n", "team", "get", "pod", "worker")
			return err == nil && strings.Contains(out, "Running"), out
		})
		expect(t, c.mustKubectl(ctx, "delete", "namespace", "team", "--timeout=90s"), `namespace "team" deleted`)
		out, err := c.kubectl(ctx, "get", "namespace", "team")
		if err == nil || !strings.Contains(out, `namespaces "team" not found`) {
			t.Errorf("namespace still there after delete --wait: %v %s", err, out)
		}
	})

	t.Run("delete --wait returns once the pod is gone", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "pod", "web", "--wait=true"), `pod "web" deleted`)
		out, err := c.kubectl(ctx, "get", "pod", "web")
		if err == nil {
			t.Errorf("pod still there: %s", out)
		}
	})

	t.Run("error text for a missing object", func(t *testing.T) {
		out, err := c.kubectl(ctx, "get", "pod", "web")
		if err == nil || strings.TrimSpace(out) != `Error from server (NotFound): pods "web" not found` {
			t.Errorf("got %v %q", err, out)
		}
	})
}
