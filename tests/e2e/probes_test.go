package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// applyManifest writes manifest to a file and `kubectl apply`s it.
func (c *cluster) applyManifest(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustKubectl(ctx, "apply", "-f", path)
}

// podRow returns the fields of `kubectl get pod name` (NAME READY STATUS
// RESTARTS AGE), nil when it fails.
func (c *cluster) podRow(ctx context.Context, name string) []string {
	out, err := c.kubectl(ctx, "get", "pod", name, "--no-headers")
	if err != nil {
		return nil
	}
	return strings.Fields(out)
}

// podEvents returns "<reason> <message>" of pod's events, oldest first.
func (c *cluster) podEvents(ctx context.Context, name string) []string {
	list, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+" "+e.Message)
	}
	return out
}

func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// TestProbesHooksAndStaticPods runs, on the process runtime, pods whose
// probes and lifecycle hooks the kubelet must honour, and a static pod.
func TestProbesHooksAndStaticPods(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")
	dir := t.TempDir()

	t.Run("a readiness exec probe keeps the pod 0/1 until its file exists", func(t *testing.T) {
		ready := filepath.Join(dir, "ready")
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: readiness}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
    readinessProbe:
      exec: {command: ["test", "-f", %q]}
      periodSeconds: 1
`, ready))
		eventually(t, 60*time.Second, func() (bool, string) {
			events := c.podEvents(ctx, "readiness")
			return hasEvent(events, "Unhealthy Readiness probe failed"), strings.Join(events, "\n")
		})
		row := c.podRow(ctx, "readiness")
		if len(row) < 3 || row[1] != "0/1" || row[2] != "Running" {
			t.Fatalf("a failing readiness probe: kubectl get pod = %v, want 0/1 Running", row)
		}
		pod, err := pods.Get(ctx, "readiness", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range pod.Status.Conditions {
			if (cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady) && cond.Status != corev1.ConditionFalse {
				t.Errorf("condition %s = %s, want False", cond.Type, cond.Status)
			}
		}
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() (bool, string) {
			row := c.podRow(ctx, "readiness")
			return len(row) > 2 && row[1] == "1/1" && row[2] == "Running", fmt.Sprint(row)
		})
	})

	t.Run("a failing liveness probe restarts the container", func(t *testing.T) {
		c.applyManifest(ctx, t, `apiVersion: v1
kind: Pod
metadata: {name: liveness}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
    livenessProbe:
      exec: {command: ["sh", "-c", "echo sick; exit 1"]}
      periodSeconds: 1
      failureThreshold: 2
`)
		eventually(t, 120*time.Second, func() (bool, string) {
			row := c.podRow(ctx, "liveness")
			if len(row) < 4 {
				return false, fmt.Sprint(row)
			}
			restarts, _ := strconv.Atoi(row[3])
			return restarts >= 2, fmt.Sprint(row)
		})
		events := c.podEvents(ctx, "liveness")
		for _, want := range []string{"Unhealthy Liveness probe failed: sick", "Killing Container main failed liveness probe, will be restarted"} {
			if !hasEvent(events, want) {
				t.Errorf("events lack %q:\n%s", want, strings.Join(events, "\n"))
			}
		}
	})

	t.Run("a startup probe holds liveness off until it succeeds", func(t *testing.T) {
		started := filepath.Join(dir, "started")
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: startup}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
    startupProbe:
      exec: {command: ["test", "-f", %q]}
      periodSeconds: 1
      failureThreshold: 600
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 1
`, started))
		// Three failed startup probes are three seconds in which a running
		// liveness probe would have killed the container.
		eventually(t, 60*time.Second, func() (bool, string) {
			list, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "startup").String()})
			if err != nil {
				return false, err.Error()
			}
			failures := int32(0)
			for _, e := range list.Items {
				if e.Reason == "Unhealthy" && strings.HasPrefix(e.Message, "Startup probe failed") {
					failures += max(e.Count, 1)
				}
			}
			return failures >= 3, fmt.Sprint(c.podEvents(ctx, "startup"))
		})
		pod, err := pods.Get(ctx, "startup", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := containerStatus(pod)
		if cs == nil || cs.RestartCount != 0 || cs.Started == nil || *cs.Started || cs.Ready {
			t.Fatalf("while the startup probe fails: %+v, want running, not started, not restarted", cs)
		}
		if events := c.podEvents(ctx, "startup"); hasEvent(events, "Unhealthy Liveness probe failed") {
			t.Fatalf("liveness ran before startup succeeded:\n%s", strings.Join(events, "\n"))
		}
		if err := os.WriteFile(started, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, func() (bool, string) {
			events := c.podEvents(ctx, "startup")
			return hasEvent(events, "Unhealthy Liveness probe failed") && hasEvent(events, "Killing Container main failed liveness probe"),
				strings.Join(events, "\n")
		})
	})

	t.Run("httpGet and tcpSocket probes against the pod's own server", func(t *testing.T) {
		server := filepath.Join(t.TempDir(), "webserver")
		if out, err := exec.Command("go", "build", "-o", server, "./testdata/webserver").CombinedOutput(); err != nil {
			t.Fatalf("build webserver: %v\n%s", err, out)
		}
		port := freePort(t)
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: main
    image: webserver
    command: [%q, "%d"]
    ports: [{name: http, containerPort: %d}]
    readinessProbe:
      httpGet: {host: 127.0.0.1, path: /, port: http}
      periodSeconds: 1
    livenessProbe:
      tcpSocket: {host: 127.0.0.1, port: %d}
      periodSeconds: 1
      failureThreshold: 1
`, server, port, port, port))
		eventually(t, 60*time.Second, func() (bool, string) {
			row := c.podRow(ctx, "web")
			return len(row) > 3 && row[1] == "1/1" && row[2] == "Running" && row[3] == "0", fmt.Sprint(row)
		})
	})

	t.Run("postStart writes a file the container reads; preStop runs on delete", func(t *testing.T) {
		hooked, bye := filepath.Join(dir, "poststart"), filepath.Join(dir, "prestop")
		c.applyManifest(ctx, t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hooks}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "while [ ! -f %[1]s ]; do sleep 0.1; done; cat %[1]s; exec sleep 3600"]
    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "echo written by postStart > %[1]s"]}
      preStop:
        exec: {command: ["sh", "-c", "echo bye > %[2]s"]}
`, hooked, bye))
		eventually(t, 60*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "logs", "hooks")
			return err == nil && strings.Contains(out, "written by postStart"), out
		})
		c.mustKubectl(ctx, "delete", "pod", "hooks", "--wait=true")
		if b, err := os.ReadFile(bye); err != nil || string(b) != "bye\n" {
			t.Errorf("preStop file: %q, %v", b, err)
		}
	})

	t.Run("a static pod manifest shows as a mirror pod that survives kubectl delete", func(t *testing.T) {
		manifest := `apiVersion: v1
kind: Pod
metadata: {name: static-web}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
`
		if err := os.WriteFile(filepath.Join(c.DataDir, "manifests", "static-web.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		name := "static-web-e2e-process"
		var uid string
		eventually(t, 90*time.Second, func() (bool, string) {
			row := c.podRow(ctx, name)
			pod, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			uid = string(pod.UID)
			return len(row) > 2 && row[1] == "1/1" && row[2] == "Running" && pod.Annotations[corev1.MirrorPodAnnotationKey] != "", fmt.Sprint(row)
		})
		c.mustKubectl(ctx, "delete", "pod", name, "--wait=false")
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			row := c.podRow(ctx, name)
			return string(pod.UID) != uid && pod.DeletionTimestamp == nil && len(row) > 3 && row[2] == "Running" && row[3] == "0", fmt.Sprint(row)
		})
	})
}
