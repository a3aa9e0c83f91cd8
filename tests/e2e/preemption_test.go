package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHighPriorityPodPreemptsOnAFullNode drives priority and preemption with the real
// kubectl: the node advertises one example.com/foo (a status patch, as an administrator
// or device plugin would), a low-priority pod takes it, and a high-priority pod asking
// for it preempts the low one (a Preempted event, the victim gone) and runs in its place.
func TestHighPriorityPodPreemptsOnAFullNode(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	node := "e2e-sim"
	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})
	c.mustKubectl(ctx, "patch", "node", node, "--subresource=status", "--type=merge",
		"-p", `{"status":{"capacity":{"example.com/foo":"1"},"allocatable":{"example.com/foo":"1"}}}`)
	// The kubelet's next status update keeps the extended resource.
	eventually(t, time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.allocatable.example\.com/foo}`)
		return out == "1", "allocatable example.com/foo: " + out
	})
	c.mustKubectl(ctx, "create", "priorityclass", "low", "--value=10")
	c.mustKubectl(ctx, "create", "priorityclass", "high", "--value=1000")
	pod := func(name, class string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `"},"spec":{"priorityClassName":"` + class + `",` +
			`"terminationGracePeriodSeconds":0,"containers":[{"name":"c","image":"busybox","command":["sleep","3600"],` +
			`"resources":{"requests":{"example.com/foo":"1"},"limits":{"example.com/foo":"1"}}}]}}`
	}
	apply := func(manifest string) {
		t.Helper()
		cmd := c.kubectlCmd(ctx, nil, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	apply(pod("low", "low"))
	c.mustKubectl(ctx, "wait", "--for=condition=Ready", "pod/low", "--timeout=90s")
	if out := c.mustKubectl(ctx, "get", "pod", "low", "-o", "jsonpath={.spec.priority}"); out != "10" {
		t.Errorf("low's priority %q, want 10 from its class", out)
	}

	apply(pod("high", "high"))
	c.mustKubectl(ctx, "wait", "--for=condition=Ready", "pod/high", "--timeout=120s")
	eventually(t, time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "pod", "low")
		return strings.Contains(out, "NotFound"), "low: " + out
	})
	events := c.mustKubectl(ctx, "get", "events", "--field-selector", "reason=Preempted")
	if !strings.Contains(events, "Preempted by pod") || !strings.Contains(events, "on node "+node) {
		t.Errorf("no Preempted event:\n%s", events)
	}
}
