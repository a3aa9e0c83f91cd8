package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// daemonSetManifest is a DaemonSet for the nodes labelled ds=yes.
const daemonSetManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels:
      app: agent
  template:
    metadata:
      labels:
        app: agent
    spec:
      nodeSelector:
        ds: "yes"
      terminationGracePeriodSeconds: 1
      containers:
      - name: agent
        image: busybox
        command: ["sleep", "3600"]
`

// TestDaemonSets drives a DaemonSet with the real kubectl against skiff with the sim
// runtime and two hollow nodes (three nodes): one pod on each eligible node, a node
// labelled later gets one, rollout status, set image rolls the pods, rollout history
// lists both revisions, rollout undo goes back (and an undo to the current revision is
// skipped), and a delete removes the pods.
func TestDaemonSets(t *testing.T) {
	c := startSkiff(t, "sim", "--hollow-nodes", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	// row returns the fields of the line of out that starts with name.
	row := func(out, name string) string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				return strings.Join(f, " ")
			}
		}
		return ""
	}
	rolloutStatus := func(t *testing.T) {
		t.Helper()
		expect(t, c.mustKubectl(ctx, "rollout", "status", "ds/agent", "--timeout=120s"), `daemon set "agent" successfully rolled out`)
	}
	// podNodes lists the nodes the DaemonSet's live (not terminating) pods are bound
	// to, sorted, and their images in the same order.
	podNodes := func() (string, string) {
		out, _ := c.kubectl(ctx, "get", "pods", "-l", "app=agent", "-o",
			`jsonpath={range .items[*]}{.spec.nodeName} {.spec.containers[0].image} {.metadata.deletionTimestamp}{"\n"}{end}`)
		var live []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				live = append(live, f[0]+" "+f[1])
			}
		}
		sort.Strings(live)
		var nodes, images []string
		for _, l := range live {
			f := strings.Fields(l)
			nodes, images = append(nodes, f[0]), append(images, f[1])
		}
		return strings.Join(nodes, ","), strings.Join(images, " ")
	}
	nodes := []string{"e2e-sim", "hollow-0", "hollow-1"}
	eventually(t, 3*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		for _, n := range nodes {
			if !strings.Contains(out, n+"=True") {
				return false, "nodes: " + out
			}
		}
		return true, ""
	})

	t.Run("one pod on each eligible node", func(t *testing.T) {
		c.mustKubectl(ctx, "label", "node", "e2e-sim", "hollow-0", "ds=yes")
		manifest := filepath.Join(t.TempDir(), "ds.yaml")
		if err := os.WriteFile(manifest, []byte(daemonSetManifest), 0o644); err != nil {
			t.Fatal(err)
		}
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), "daemonset.apps/agent created")
		rolloutStatus(t)
		eventually(t, time.Minute, func() (bool, string) {
			got, _ := podNodes()
			return got == "e2e-sim,hollow-0", "pods on " + got
		})
		out := c.mustKubectl(ctx, "get", "ds", "agent")
		expect(t, out, "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE")
		if r := row(out, "agent"); !strings.HasPrefix(r, "agent 2 2 2 2 2 ds=yes ") {
			t.Errorf("row %q, want agent 2 2 2 2 2 ds=yes AGE", r)
		}
	})

	t.Run("a node labelled later gets a pod", func(t *testing.T) {
		c.mustKubectl(ctx, "label", "node", "hollow-1", "ds=yes")
		eventually(t, 2*time.Minute, func() (bool, string) {
			got, _ := podNodes()
			return got == "e2e-sim,hollow-0,hollow-1", "pods on " + got
		})
		rolloutStatus(t)
		out := c.mustKubectl(ctx, "get", "ds", "agent", "-o", "wide")
		expect(t, out, "CONTAINERS", "IMAGES", "SELECTOR")
		if r := row(out, "agent"); !strings.HasPrefix(r, "agent 3 3 3 3 3 ds=yes ") || !strings.HasSuffix(r, " agent busybox app=agent") {
			t.Errorf("wide row %q", r)
		}
	})

	t.Run("set image rolls every pod", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "set", "image", "ds/agent", "agent=busybox:1.36"), "daemonset.apps/agent image updated")
		rolloutStatus(t)
		eventually(t, 2*time.Minute, func() (bool, string) {
			got, imgs := podNodes()
			return got == "e2e-sim,hollow-0,hollow-1" && imgs == "busybox:1.36 busybox:1.36 busybox:1.36", "pods on " + got + " images " + imgs
		})
	})

	t.Run("rollout history and undo", func(t *testing.T) {
		history := c.mustKubectl(ctx, "rollout", "history", "ds/agent")
		expect(t, history, "daemonset.apps/agent", "REVISION", "CHANGE-CAUSE", "1 ", "2 ")
		expect(t, c.mustKubectl(ctx, "get", "controllerrevisions", "-l", "app=agent"), "NAME", "CONTROLLER", "REVISION", "daemonset.apps/agent")
		expect(t, c.mustKubectl(ctx, "rollout", "undo", "ds/agent"), "daemonset.apps/agent rolled back")
		rolloutStatus(t)
		eventually(t, 2*time.Minute, func() (bool, string) {
			got, imgs := podNodes()
			return got == "e2e-sim,hollow-0,hollow-1" && imgs == "busybox busybox busybox", "pods on " + got + " images " + imgs
		})
		expect(t, c.mustKubectl(ctx, "get", "ds", "agent", "-o", "jsonpath={.spec.template.spec.containers[0].image}"), "busybox")
		history = c.mustKubectl(ctx, "rollout", "history", "ds/agent")
		expect(t, history, "2 ", "3 ")
		if strings.Contains(history, "\n1 ") {
			t.Errorf("revision 1 should have become 3:\n%s", history)
		}
		// kubectl compares the revision's bytes with the patch it makes of the
		// DaemonSet: an undo to the current revision is skipped.
		expect(t, c.mustKubectl(ctx, "rollout", "undo", "ds/agent", "--to-revision=3"),
			"daemonset.apps/agent skipped rollback (current template already matches revision 3)")
	})

	t.Run("delete removes the pods", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "ds", "agent"), `daemonset.apps "agent" deleted`)
		eventually(t, 2*time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "pods,controllerrevisions", "-l", "app=agent", "-o", "name")
			return strings.TrimSpace(out) == "", "left: " + out
		})
	})
}
