package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDrainHonoursPodDisruptionBudget drives kubectl drain against skiff with the process
// runtime: drain evicts through the Eviction API (pods/eviction), so a
// PodDisruptionBudget that allows no disruption stops it with kube's message; once the
// budget allows one pod to go, drain evicts that one; with the budget gone it drains the
// node.
func TestDrainHonoursPodDisruptionBudget(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const node = "e2e-process"
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	allowed := func(want string) {
		t.Helper()
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "pdb", "web", "-o", "jsonpath={.status.disruptionsAllowed}/{.status.observedGeneration}/{.metadata.generation}")
			parts := strings.Split(out, "/")
			return len(parts) == 3 && parts[0] == want && parts[1] == parts[2], "disruptionsAllowed/observedGeneration/generation: " + out
		})
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})
	c.mustKubectl(ctx, "create", "deployment", "web", "--image=busybox", "--replicas=2", "--", "sleep", "3600")
	expect(t, c.mustKubectl(ctx, "rollout", "status", "deployment/web", "--timeout=120s"), `deployment "web" successfully rolled out`)
	expect(t, c.mustKubectl(ctx, "create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=2"),
		"poddisruptionbudget.policy/web created")
	allowed("0")
	expect(t, c.mustKubectl(ctx, "get", "pdb", "web"), "NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE", "web", "2", "N/A")

	drain := func(timeout string) (string, error) {
		return c.kubectl(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout="+timeout)
	}

	t.Run("blocked by the budget", func(t *testing.T) {
		out, err := drain("12s")
		if err == nil {
			t.Fatalf("drain succeeded past a budget allowing no disruption:\n%s", out)
		}
		expect(t, out, "node/"+node+" cordoned", "Cannot evict pod as it would violate the pod's disruption budget.")
		if strings.Contains(out, " evicted") {
			t.Errorf("a pod was evicted:\n%s", out)
		}
		pods := c.mustKubectl(ctx, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.deletionTimestamp}.{end}")
		if pods != ".." {
			t.Errorf("pods marked for deletion: %q", pods)
		}
	})

	t.Run("one disruption allowed", func(t *testing.T) {
		c.mustKubectl(ctx, "patch", "pdb", "web", "--type=merge", "-p", `{"spec":{"minAvailable":1}}`)
		allowed("1")
		// One pod may go; its replacement cannot land on the cordoned node, so the
		// other stays protected and drain times out on it.
		out, _ := drain("20s")
		expect(t, out, "evicting pod default/web-", " evicted")
		if n := strings.Count(out, " evicted\n"); n != 1 {
			t.Errorf("want exactly one pod evicted, got %d:\n%s", n, out)
		}
	})

	t.Run("budget deleted", func(t *testing.T) {
		c.mustKubectl(ctx, "delete", "pdb", "web")
		out, err := drain("60s")
		if err != nil {
			t.Fatalf("drain: %v\n%s", err, out)
		}
		expect(t, out, "evicting pod default/web-", " evicted", "node/"+node+" drained")
	})
}
