package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWorkloads drives Deployments, ReplicaSets and Jobs with the real kubectl against
// skiff with the process runtime (real host processes): create, rollout status, set
// image, rollout history and undo, scale, cascading delete, a Job to completion, an
// Indexed Job whose pods print their $JOB_COMPLETION_INDEX, and kube's columns for each
// kind.
func TestWorkloads(t *testing.T) {
	c := startSkiff(t, "process")
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
	rolloutStatus := func(t *testing.T) {
		t.Helper()
		expect(t, c.mustKubectl(ctx, "rollout", "status", "deployment/web", "--timeout=120s"), `deployment "web" successfully rolled out`)
	}
	countPods := func(selector string) int {
		out := c.mustKubectl(ctx, "get", "pods", "-l", selector, "-o", "name")
		return len(strings.Fields(out))
	}

	// Pods placed before the node is Ready would be marked not ready by the node
	// lifecycle controller when it first sees the node: start from a Ready node.
	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", "e2e-process", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})

	t.Run("create deployment and rollout status", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "deployment", "web", "--image=busybox", "--replicas=3", "--", "sleep", "3600"),
			"deployment.apps/web created")
		rolloutStatus(t)
		expect(t, c.mustKubectl(ctx, "get", "deploy", "web"), "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "3/3")
	})

	t.Run("set image rolls out a new revision", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "set", "image", "deployment/web", "busybox=busybox:1.36"), "deployment.apps/web image updated")
		rolloutStatus(t)
		expect(t, c.mustKubectl(ctx, "get", "deploy", "web", "-o", "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}"), "2")
		rs := c.mustKubectl(ctx, "get", "rs", "-l", "app=web")
		expect(t, rs, "NAME", "DESIRED", "CURRENT", "READY", "AGE")
		if n := len(strings.Split(strings.TrimSpace(rs), "\n")) - 1; n != 2 {
			t.Errorf("want the old and the new ReplicaSet, got %d:\n%s", n, rs)
		}
	})

	t.Run("rollout history and undo", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "rollout", "history", "deployment/web"), "REVISION", "1", "2")
		expect(t, c.mustKubectl(ctx, "rollout", "undo", "deployment/web"), "deployment.apps/web rolled back")
		rolloutStatus(t)
		expect(t, c.mustKubectl(ctx, "get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}"),
			"busybox 3")
	})

	t.Run("scale", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "scale", "deployment/web", "--replicas=5"), "deployment.apps/web scaled")
		rolloutStatus(t)
		expect(t, c.mustKubectl(ctx, "get", "deploy", "web"), "5/5")
		if n := countPods("app=web"); n != 5 {
			t.Errorf("want 5 pods, got %d", n)
		}
	})

	t.Run("job runs to completion", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "job", "hello", "--image=busybox", "--", "sh", "-c", "echo hello from the job"), "job.batch/hello created")
		expect(t, c.mustKubectl(ctx, "wait", "--for=condition=complete", "job/hello", "--timeout=120s"), "job.batch/hello condition met")
		expect(t, c.mustKubectl(ctx, "get", "job", "hello"), "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "Complete", "1/1")
		expect(t, c.mustKubectl(ctx, "logs", "job/hello"), "hello from the job")
	})

	t.Run("indexed job gives each pod its completion index", func(t *testing.T) {
		c.applyManifest(ctx, t, `apiVersion: batch/v1
kind: Job
metadata:
  name: indexed
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX host=$(hostname)"]
`)
		expect(t, c.mustKubectl(ctx, "wait", "--for=condition=complete", "job/indexed", "--timeout=120s"), "job.batch/indexed condition met")
		expect(t, c.mustKubectl(ctx, "get", "job", "indexed"), "Complete", "3/3")
		expect(t, c.mustKubectl(ctx, "get", "job", "indexed", "-o", "jsonpath={.status.completedIndexes}"), "0-2")
		for _, ix := range []string{"0", "1", "2"} {
			pods := strings.Fields(c.mustKubectl(ctx, "get", "pods", "-l", "batch.kubernetes.io/job-name=indexed,batch.kubernetes.io/job-completion-index="+ix, "-o", "name"))
			if len(pods) != 1 {
				t.Fatalf("index %s: want one pod, got %v", ix, pods)
			}
			expect(t, c.mustKubectl(ctx, "logs", pods[0]), "index="+ix)
		}
		expect(t, c.mustKubectl(ctx, "delete", "job", "indexed"), `job.batch "indexed" deleted`)
	})

	t.Run("cronjob, and a job made from it by hand", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *", "--", "sh", "-c", "echo tick"),
			"cronjob.batch/tick created")
		expect(t, c.mustKubectl(ctx, "get", "cj", "tick"), "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "*/5 * * * *", "False")
		expect(t, c.mustKubectl(ctx, "create", "job", "tick-now", "--from=cronjob/tick"), "job.batch/tick-now created")
		expect(t, c.mustKubectl(ctx, "wait", "--for=condition=complete", "job/tick-now", "--timeout=120s"), "job.batch/tick-now condition met")
		expect(t, c.mustKubectl(ctx, "delete", "cronjob", "tick"), `cronjob.batch "tick" deleted`)
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "job", "tick-now", "-o", "name")
			return strings.Contains(out, "NotFound"), "the job made from the cronjob is still there: " + out
		})
	})

	t.Run("get deploy,rs,job shows each kind's columns", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "get", "deploy,rs,job"),
			"deployment.apps/web", "UP-TO-DATE", "replicaset.apps/web-", "DESIRED", "job.batch/hello", "COMPLETIONS")
		expect(t, c.mustKubectl(ctx, "get", "all"), "deployment.apps/web", "replicaset.apps/web-", "job.batch/hello", "pod/web-")
	})

	t.Run("delete deployment removes its ReplicaSets and pods", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "deployment", "web"), `deployment.apps "web" deleted`)
		eventually(t, 2*time.Minute, func() (bool, string) {
			rs := strings.TrimSpace(c.mustKubectl(ctx, "get", "rs", "-l", "app=web", "-o", "name"))
			pods := countPods("app=web")
			return rs == "" && pods == 0, "ReplicaSets: " + rs + "; pods left: " + strings.Repeat("x", pods)
		})
	})

	t.Run("delete job removes its pods", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "job", "hello"), `job.batch "hello" deleted`)
		eventually(t, time.Minute, func() (bool, string) {
			n := countPods("batch.kubernetes.io/job-name=hello")
			return n == 0, "the job's pod is still there"
		})
	})
}
