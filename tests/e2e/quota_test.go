package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestResourceQuotaAndLimitRange drives quotas and limit ranges with the real kubectl:
// `kubectl create quota`, the resource quota controller filling the quota's status, a
// second pod refused by ResourceQuota admission with kube's message, kubectl's quota
// columns, and a LimitRange whose defaults the LimitRanger plugin puts on a pod.
func TestResourceQuotaAndLimitRange(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	newNamespace := func(name string) {
		c.mustKubectl(ctx, "create", "namespace", name)
		eventually(t, time.Minute, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "serviceaccount", "default", "-n", name)
			return err == nil, out
		})
	}

	t.Run("quota refuses the pod past its limit", func(t *testing.T) {
		newNamespace("quota")
		expect(t, c.mustKubectl(ctx, "create", "quota", "q", "--hard=pods=1", "-n", "quota"), "resourcequota/q created")
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "quota", "q", "-n", "quota", "-o", "jsonpath={.status.hard.pods}/{.status.used.pods}")
			return out == "1/0", "status hard/used: " + out
		})
		expect(t, c.mustKubectl(ctx, "run", "first", "--image=busybox", "-n", "quota", "--", "sleep", "3600"), "pod/first created")
		out, err := c.kubectl(ctx, "run", "second", "--image=busybox", "-n", "quota", "--", "sleep", "3600")
		if err == nil {
			t.Fatalf("a second pod was created past pods=1:\n%s", out)
		}
		expect(t, out, `pods "second" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1`)
		expect(t, c.mustKubectl(ctx, "get", "quota", "-n", "quota"), "NAME", "AGE", "REQUEST", "LIMIT", "pods: 1/1")
		expect(t, c.mustKubectl(ctx, "describe", "quota", "q", "-n", "quota"), "Resource", "Used", "Hard", "pods")
	})

	t.Run("limit range defaults a pod's resources", func(t *testing.T) {
		newNamespace("limits")
		manifest := filepath.Join(t.TempDir(), "limits.yaml")
		if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: LimitRange
metadata:
  name: defaults
  namespace: limits
spec:
  limits:
  - type: Container
    default:
      cpu: 500m
      memory: 256Mi
    defaultRequest:
      cpu: 100m
      memory: 64Mi
    max:
      cpu: "1"
`), 0o600); err != nil {
			t.Fatal(err)
		}
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), "limitrange/defaults created")
		expect(t, c.mustKubectl(ctx, "get", "limits", "-n", "limits"), "NAME", "CREATED AT", "defaults")
		expect(t, c.mustKubectl(ctx, "run", "web", "--image=busybox", "-n", "limits", "--", "sleep", "3600"), "pod/web created")
		expect(t, c.mustKubectl(ctx, "get", "pod", "web", "-n", "limits", "-o",
			"jsonpath={.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.requests.memory} {.spec.containers[0].resources.limits.cpu} {.spec.containers[0].resources.limits.memory}"),
			"100m 64Mi 500m 256Mi")
		out, err := c.kubectl(ctx, "run", "big", "--image=busybox", "-n", "limits", "--overrides",
			`{"spec":{"containers":[{"name":"big","image":"busybox","args":["sleep","3600"],"resources":{"limits":{"cpu":"2"}}}]}}`)
		if err == nil {
			t.Fatalf("a pod over the max was created:\n%s", out)
		}
		expect(t, out, `pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2`)
	})
}
