package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestStatefulSets drives a StatefulSet behind a headless Service with the real kubectl
// on the process runtime: web-0, web-1, web-2 start in order, each only once the one
// before is Ready (a readiness probe on a file the test creates); the Service's
// endpoints carry their hostnames; an image change replaces web-2, web-1, web-0 in that
// order; kubectl rollout status, history and undo work; kubectl scale removes the
// highest ordinals first; deleting the set removes its pods and revisions.
func TestStatefulSets(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	jsonpath := func(args ...string) string {
		out, _ := c.kubectl(ctx, args...)
		return strings.TrimSpace(out)
	}
	// observed waits until the controller has written status for the set's generation
	// with status.replicas n.
	observed := func(t *testing.T, n int) {
		t.Helper()
		eventually(t, time.Minute, func() (bool, string) {
			out := jsonpath("get", "sts", "web", "-o", "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.replicas}")
			f := strings.Fields(out)
			return len(f) == 3 && f[0] == f[1] && f[2] == fmt.Sprint(n), "generation, observed, replicas: " + out
		})
	}
	podExists := func(name string) bool {
		out, err := c.kubectl(ctx, "get", "pod", name, "-o", "name")
		if err != nil && !strings.Contains(out, "NotFound") {
			t.Fatalf("kubectl get pod %s: %v\n%s", name, err, out)
		}
		return err == nil
	}
	readyDir := t.TempDir()
	markReady := func(t *testing.T, pod string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(readyDir, pod), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Pod deletions, in the order the apiserver reports them.
	var mu sync.Mutex
	var deleted []string
	w, err := c.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				mu.Lock()
				deleted = append(deleted, ev.Object.(*corev1.Pod).Name)
				mu.Unlock()
			}
		}
	}()
	deletedSince := func(n int) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(deleted[min(n, len(deleted)):])
	}
	waitDeleted := func(t *testing.T, from int, want ...string) {
		t.Helper()
		eventually(t, 3*time.Minute, func() (bool, string) {
			got := deletedSince(from)
			return slices.Equal(got, want), fmt.Sprintf("deleted %v, want %v", got, want)
		})
	}

	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", "e2e-process", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})

	t.Run("pods start in order each after the previous is Ready", func(t *testing.T) {
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, name: web}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: ["sleep", "3600"]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        readinessProbe:
          exec: {command: ["sh", "-c", "test -f %s/$POD_NAME"]}
          periodSeconds: 1
`, readyDir))
		observed(t, 1)
		if podExists("web-1") {
			t.Fatal("web-1 exists while web-0 is not Ready")
		}
		expect(t, c.mustKubectl(ctx, "get", "sts", "web"), "NAME", "READY", "AGE", "0/3")
		markReady(t, "web-0")
		observed(t, 2)
		if podExists("web-2") {
			t.Fatal("web-2 exists while web-1 is not Ready")
		}
		markReady(t, "web-1")
		markReady(t, "web-2")
		expect(t, c.mustKubectl(ctx, "rollout", "status", "sts/web", "--timeout=120s"), "partitioned roll out complete: 3 new pods have been updated")
		expect(t, c.mustKubectl(ctx, "get", "sts", "web", "-o", "wide"), "3/3", "CONTAINERS", "IMAGES", "main", "busybox")
		created := map[string]string{}
		for _, name := range []string{"web-0", "web-1", "web-2"} {
			created[name] = jsonpath("get", "pod", name, "-o", "jsonpath={.metadata.creationTimestamp}")
		}
		if !(created["web-0"] <= created["web-1"] && created["web-1"] <= created["web-2"]) {
			t.Errorf("creation times %v are not in ordinal order", created)
		}
		expect(t, jsonpath("get", "pod", "web-1", "-o", `jsonpath={.spec.hostname}.{.spec.subdomain} {.metadata.labels.statefulset\.kubernetes\.io/pod-name} {.metadata.labels.apps\.kubernetes\.io/pod-index}`),
			"web-1.web web-1 1")
	})

	t.Run("the headless Service's endpoints name each pod", func(t *testing.T) {
		eventually(t, time.Minute, func() (bool, string) {
			out := jsonpath("get", "endpoints", "web", "-o", "jsonpath={.subsets[*].addresses[*].hostname}")
			f := strings.Fields(out)
			slices.Sort(f)
			return slices.Equal(f, []string{"web-0", "web-1", "web-2"}), "endpoint hostnames: " + out
		})
	})

	t.Run("an image change rolls from web-2 down to web-0", func(t *testing.T) {
		from := len(deletedSince(0))
		expect(t, c.mustKubectl(ctx, "set", "image", "sts/web", "main=busybox:1.36"), "statefulset.apps/web image updated")
		expect(t, c.mustKubectl(ctx, "rollout", "status", "sts/web", "--timeout=180s"), "partitioned roll out complete: 3 new pods have been updated")
		waitDeleted(t, from, "web-2", "web-1", "web-0")
		expect(t, jsonpath("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"), "busybox:1.36 busybox:1.36 busybox:1.36")
		st := jsonpath("get", "sts", "web", "-o", "jsonpath={.status.currentRevision} {.status.updateRevision} {.status.updatedReplicas}")
		if f := strings.Fields(st); len(f) != 3 || f[0] != f[1] || f[2] != "3" {
			t.Errorf("status after the update: %s, want current == update revision and 3 updated", st)
		}
	})

	t.Run("rollout history shows 2 revisions and undo rolls back", func(t *testing.T) {
		history := c.mustKubectl(ctx, "rollout", "history", "sts/web")
		expect(t, history, "statefulset.apps/web", "REVISION", "CHANGE-CAUSE")
		var revisions []string
		for _, line := range strings.Split(history, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] != "REVISION" && !strings.Contains(f[0], "/") {
				revisions = append(revisions, f[0])
			}
		}
		if !slices.Equal(revisions, []string{"1", "2"}) {
			t.Errorf("rollout history revisions %v, want [1 2]:\n%s", revisions, history)
		}
		from := len(deletedSince(0))
		expect(t, c.mustKubectl(ctx, "rollout", "undo", "sts/web"), "statefulset.apps/web rolled back")
		expect(t, c.mustKubectl(ctx, "rollout", "status", "sts/web", "--timeout=180s"), "partitioned roll out complete: 3 new pods have been updated")
		waitDeleted(t, from, "web-2", "web-1", "web-0")
		expect(t, jsonpath("get", "sts", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"), "busybox")
		expect(t, jsonpath("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"), "busybox busybox busybox")
		// The first revision came back as revision 3; there are still two.
		expect(t, c.mustKubectl(ctx, "rollout", "history", "sts/web"), "2", "3")
		if n := len(strings.Fields(jsonpath("get", "controllerrevisions", "-l", "app=web", "-o", "name"))); n != 2 {
			t.Errorf("%d ControllerRevisions after the undo, want 2", n)
		}
	})

	t.Run("scale down removes web-2 first", func(t *testing.T) {
		from := len(deletedSince(0))
		expect(t, c.mustKubectl(ctx, "scale", "sts", "web", "--replicas=1"), "statefulset.apps/web scaled")
		waitDeleted(t, from, "web-2", "web-1")
		eventually(t, time.Minute, func() (bool, string) {
			out := jsonpath("get", "sts", "web", "-o", "jsonpath={.status.replicas} {.status.readyReplicas}")
			return out == "1 1", "replicas, ready: " + out
		})
		expect(t, c.mustKubectl(ctx, "get", "sts", "web"), "1/1")
	})

	t.Run("deleting the set removes its pods and revisions", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "delete", "sts", "web"), `statefulset.apps "web" deleted`)
		eventually(t, 2*time.Minute, func() (bool, string) {
			pods := jsonpath("get", "pods", "-l", "app=web", "-o", "name")
			revs := jsonpath("get", "controllerrevisions", "-l", "app=web", "-o", "name")
			return pods == "" && revs == "", "pods: " + pods + "; revisions: " + revs
		})
	})
}
