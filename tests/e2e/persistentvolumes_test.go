package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPersistentVolumes is the static-binding user story with the real kubectl against
// skiff with the process runtime: an administrator's hostPath PersistentVolume and a
// user's claim bind (kubectl get pvc shows Bound), a pod writes a file into the claim's
// mount and a second pod reads it back; a pod whose claim does not exist waits in
// ContainerCreating with a FailedMount event; a deleted claim releases its volume.
func TestPersistentVolumes(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	expect := func(t *testing.T, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	dataDir, manifests := t.TempDir(), t.TempDir()
	applied := 0
	apply := func(t *testing.T, manifest string) string {
		t.Helper()
		applied++
		file := filepath.Join(manifests, fmt.Sprintf("%d.yaml", applied))
		if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		return c.mustKubectl(ctx, "apply", "-f", file)
	}
	pod := func(name, script string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", %q]
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: data
`, name, script)
	}
	succeeded := func(t *testing.T, name string) {
		t.Helper()
		eventually(t, 2*time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "pod", name, "-o", "jsonpath={.status.phase}")
			return out == "Succeeded", name + " phase " + out
		})
	}

	t.Run("a hostPath PV and a claim bind", func(t *testing.T) {
		expect(t, apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  storageClassName: manual
  hostPath:
    path: %s
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  storageClassName: manual
  accessModes: ["ReadWriteOnce"]
  resources:
    requests:
      storage: 500Mi
`, dataDir)), "persistentvolume/pv-data created", "persistentvolumeclaim/data created")
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "pvc", "data")
			return strings.Contains(out, "Bound"), out
		})
		expect(t, c.mustKubectl(ctx, "get", "pvc", "data"),
			"NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE",
			"Bound", "pv-data", "1Gi", "RWO", "manual")
		expect(t, c.mustKubectl(ctx, "get", "pv"),
			"NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS",
			"pv-data", "Retain", "Bound", "default/data")
	})

	t.Run("a pod writes into the claim, a second pod reads it", func(t *testing.T) {
		apply(t, pod("writer", "echo hello from the writer > /data/greeting"))
		succeeded(t, "writer")
		if b, err := os.ReadFile(filepath.Join(dataDir, "greeting")); err != nil || string(b) != "hello from the writer\n" {
			t.Errorf("the volume's directory holds %q, %v", b, err)
		}
		apply(t, pod("reader", "cat /data/greeting"))
		succeeded(t, "reader")
		expect(t, c.mustKubectl(ctx, "logs", "reader"), "hello from the writer")
	})

	t.Run("a pod whose claim is missing is not scheduled", func(t *testing.T) {
		// The scheduler's VolumeBinding refuses it (UnschedulableAndUnresolvable), as
		// kube's does, until the claim exists.
		apply(t, strings.Replace(pod("waiter", "true"), "claimName: data", "claimName: nothing", 1))
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=waiter,reason=FailedScheduling")
			return strings.Contains(out, `persistentvolumeclaim "nothing" not found`), out
		})
		expect(t, c.mustKubectl(ctx, "get", "pod", "waiter"), "Pending")
		c.mustKubectl(ctx, "delete", "pod", "waiter", "--wait=false")
	})

	t.Run("deleting the claim releases the volume", func(t *testing.T) {
		c.mustKubectl(ctx, "delete", "pod", "writer", "reader")
		expect(t, c.mustKubectl(ctx, "delete", "pvc", "data", "--timeout=60s"), `persistentvolumeclaim "data" deleted`)
		eventually(t, time.Minute, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "pv", "pv-data")
			return strings.Contains(out, "Released"), out
		})
	})
}
