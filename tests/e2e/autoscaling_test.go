package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHorizontalPodAutoscalerWithKubectl drives kubectl autoscale against skiff, which
// serves no metrics API: the Deployment is scaled up to --min, kubectl get hpa prints
// kube's columns with the cpu target unknown, both autoscaling versions show the same
// object, and the controller reports why it cannot scale on cpu.
func TestHorizontalPodAutoscalerWithKubectl(t *testing.T) {
	c := startSkiff(t, "sim", "--horizontal-pod-autoscaler-sync-period=1s")
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
	expect(t, c.mustKubectl(ctx, "api-resources", "--api-group=autoscaling"), "horizontalpodautoscalers", "hpa", "autoscaling/v2", "true", "HorizontalPodAutoscaler")
	c.mustKubectl(ctx, "create", "deployment", "x", "--image=busybox", "--replicas=1", "--", "sleep", "3600")
	expect(t, c.mustKubectl(ctx, "autoscale", "deployment", "x", "--min=2", "--max=5", "--cpu-percent=50"),
		"horizontalpodautoscaler.autoscaling/x autoscaled")

	eventually(t, time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "deployment", "x", "-o", "jsonpath={.spec.replicas}")
		return out == "2", "deployment replicas: " + out
	})
	eventually(t, time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "hpa", "x", "-o",
			`jsonpath={.status.currentReplicas}/{.status.conditions[?(@.type=="ScalingActive")].reason}`)
		return out == "2/FailedGetResourceMetric", "currentReplicas/ScalingActive reason: " + out
	})
	out := c.mustKubectl(ctx, "get", "hpa")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE" {
		t.Fatalf("kubectl get hpa:\n%s", out)
	}
	if row := strings.Fields(lines[1]); len(row) != 8 || strings.Join(row[:7], " ") != "x Deployment/x cpu: <unknown>/50% 2 5 2" {
		t.Errorf("kubectl get hpa row %q", lines[1])
	}
	expect(t, c.mustKubectl(ctx, "get", "horizontalpodautoscalers.v1.autoscaling", "x", "-o", "jsonpath={.spec.targetCPUUtilizationPercentage}/{.spec.minReplicas}"), "50/2")
	expect(t, c.mustKubectl(ctx, "get", "horizontalpodautoscalers.v2.autoscaling", "x", "-o",
		"jsonpath={.spec.metrics[0].resource.name}/{.spec.metrics[0].resource.target.averageUtilization}"), "cpu/50")
	expect(t, c.mustKubectl(ctx, "describe", "hpa", "x"), "Deployment/x", "FailedGetResourceMetric", "SuccessfulRescale",
		"New size: 2; reason: Current number of replicas below Spec.MinReplicas")
	expect(t, c.mustKubectl(ctx, "delete", "hpa", "x"), `horizontalpodautoscaler.autoscaling "x" deleted`)
}
