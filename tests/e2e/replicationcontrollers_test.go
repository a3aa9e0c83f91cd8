package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const rcManifest = `apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  replicas: 2
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
`

const podTemplateManifest = `apiVersion: v1
kind: PodTemplate
metadata:
  name: web-template
template:
  metadata:
    labels:
      app: web
      tier: front
  spec:
    containers:
    - name: nginx
      image: nginx:1.27
`

// TestReplicationControllersWithKubectl drives ReplicationControllers and PodTemplates
// with the real kubectl against skiff with the sim runtime: create -f, get with kube's
// columns, scale, describe, expose, get all, delete (the pods go with the controller),
// and get podtemplates.
func TestReplicationControllersWithKubectl(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	// rcRow waits until `kubectl get rc web` shows desired, current and ready.
	rcRow := func(t *testing.T, want string) {
		t.Helper()
		eventually(t, 90*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "rc", "web", "--no-headers")
			fields := strings.Fields(out)
			return err == nil && len(fields) >= 4 && strings.Join(fields[:4], " ") == "web "+want, out
		})
	}
	countPods := func() int {
		return len(strings.Fields(c.mustKubectl(ctx, "get", "pods", "-l", "app=web", "-o", "name")))
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", "e2e-sim", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})

	t.Run("create -f and get rc", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "-f", write("rc.yaml", rcManifest)), "replicationcontroller/web created")
		rcRow(t, "2 2 2")
		out := c.mustKubectl(ctx, "get", "rc")
		expect(t, out, "NAME", "DESIRED", "CURRENT", "READY", "AGE")
		expect(t, c.mustKubectl(ctx, "get", "replicationcontrollers", "-o", "wide"), "CONTAINERS", "IMAGES", "SELECTOR", "nginx:1.27", "app=web")
		ref := c.mustKubectl(ctx, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.ownerReferences[0].kind}/{.items[0].metadata.ownerReferences[0].name}")
		if ref != "ReplicationController/web" {
			t.Errorf("pod owner %q, want ReplicationController/web", ref)
		}
	})

	t.Run("scale rc", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "scale", "rc", "web", "--replicas=3"), "replicationcontroller/web scaled")
		rcRow(t, "3 3 3")
		if n := countPods(); n != 3 {
			t.Errorf("want 3 pods, got %d", n)
		}
	})

	t.Run("describe rc", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "describe", "rc", "web"),
			"Selector:     app=web", "Replicas:     3 current / 3 desired", "Pods Status:  3 Running",
			"SuccessfulCreate", "replication-controller", "Created pod: web-")
	})

	t.Run("expose rc", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "expose", "rc", "web", "--port=80"), "service/web exposed")
		expect(t, c.mustKubectl(ctx, "get", "service", "web", "-o", "jsonpath={.spec.selector.app} {.spec.ports[0].port}"), "web 80")
	})

	t.Run("get all lists the rc", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "get", "all"), "replicationcontroller/web", "pod/web-", "service/web")
	})

	t.Run("podtemplates", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "-f", write("podtemplate.yaml", podTemplateManifest)), "podtemplate/web-template created")
		out := c.mustKubectl(ctx, "get", "podtemplates")
		expect(t, out, "NAME", "CONTAINERS", "IMAGES", "POD LABELS", "web-template", "nginx:1.27", "app=web,tier=front")
		expect(t, c.mustKubectl(ctx, "delete", "podtemplate", "web-template"), `podtemplate "web-template" deleted`)
	})

	t.Run("delete rc removes its pods", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "rc", "web"), `replicationcontroller "web" deleted`)
		eventually(t, 2*time.Minute, func() (bool, string) {
			rc, _ := c.kubectl(ctx, "get", "rc", "-o", "name")
			n := countPods()
			return strings.TrimSpace(rc) == "" && n == 0, "rcs: " + rc + "; pods left: " + strings.Repeat("x", n)
		})
	})
}
