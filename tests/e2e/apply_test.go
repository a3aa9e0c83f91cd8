package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectlApplyExplainAndDeleteAll drives what users reach for beyond get and create
// with the real kubectl: server-side apply between two field managers (the conflict,
// then --force-conflicts), kubectl diff, strict validation of a typo, kubectl explain
// from the served OpenAPI schemas, and delete --all.
func TestKubectlApplyExplainAndDeleteAll(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	manifest := func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pod := func(image string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ssa\n  labels:\n    app: ssa\nspec:\n  containers:\n  - name: c\n    image: " + image + "\n"
	}
	v1 := manifest("v1.yaml", pod("busybox:1.36"))
	v2 := manifest("v2.yaml", pod("busybox:1.37"))
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	image := func() string {
		return c.mustKubectl(ctx, "get", "pod", "ssa", "-o", "jsonpath={.spec.containers[0].image}")
	}

	t.Run("apply --server-side creates", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "apply", "--server-side", "--field-manager=alice", "-f", v1), "pod/ssa serverside-applied")
	})

	t.Run("a second field manager conflicts", func(t *testing.T) {
		out, err := c.kubectl(ctx, "apply", "--server-side", "--field-manager=bob", "-f", v2)
		if err == nil {
			t.Fatalf("conflicting apply succeeded:\n%s", out)
		}
		expect(t, out, `Apply failed with 1 conflict: conflict with "alice": .spec.containers[name="c"].image`, "--force-conflicts")
		if got := image(); got != "busybox:1.36" {
			t.Errorf("image %s after a refused apply, want busybox:1.36", got)
		}
	})

	t.Run("kubectl diff shows the change without making it", func(t *testing.T) {
		out, err := c.kubectl(ctx, "diff", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", v2)
		if err == nil {
			t.Errorf("kubectl diff exited 0 for a change:\n%s", out)
		}
		expect(t, out, "-  - image: busybox:1.36", "+  - image: busybox:1.37")
		if got := image(); got != "busybox:1.36" {
			t.Errorf("kubectl diff changed the image to %s", got)
		}
	})

	t.Run("--force-conflicts takes ownership", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", v2), "pod/ssa serverside-applied")
		if got := image(); got != "busybox:1.37" {
			t.Errorf("image %s, want busybox:1.37", got)
		}
		expect(t, c.mustKubectl(ctx, "get", "pod", "ssa", "--show-managed-fields", "-o", "yaml"), "manager: bob", "operation: Apply")
	})

	t.Run("apply of a typo'd field fails strict validation", func(t *testing.T) {
		typo := manifest("typo.yaml", strings.Replace(pod("busybox:1.37"), "    image:", "    imagee:", 1))
		out, err := c.kubectl(ctx, "apply", "-f", typo)
		if err == nil {
			t.Fatalf("apply of an unknown field succeeded:\n%s", out)
		}
		expect(t, out, `strict decoding error: unknown field "spec.containers[0].imagee"`)
	})

	t.Run("explain reads the served schemas", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "explain", "pods.spec"), "KIND:       Pod", "FIELD: spec <PodSpec>", "containers\t<[]Container> -required-")
		expect(t, c.mustKubectl(ctx, "explain", "configmap.data"), "FIELD: data <map[string]string>", "Data contains the configuration data.")
	})

	t.Run("delete pods --all", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			c.mustKubectl(ctx, "run", name, "--image=busybox", "--restart=Never")
		}
		expect(t, c.mustKubectl(ctx, "delete", "pods", "--all"), `pod "a" deleted`, `pod "b" deleted`, `pod "ssa" deleted`)
		expect(t, c.mustKubectl(ctx, "get", "pods"), "No resources found in default namespace.")
	})
}
