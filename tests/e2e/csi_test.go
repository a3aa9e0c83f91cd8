package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestCSIStorageAPIs drives the storage.k8s.io/v1 CSI objects with the real kubectl
// against skiff with the sim runtime: a CSIDriver, a CSINode, a CSIStorageCapacity and a
// VolumeAttachment on the running node applied from one manifest; kubectl get with kube's
// columns, describe and explain; a refused change of an immutable field with kube's
// message; the VolumeAttachment's status patched through volumeattachments/status, as the
// conformance suite's spec does, while a server-side apply of its labels leaves it; and
// delete.
func TestCSIStorageAPIs(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.mustKubectl(ctx, "create", "namespace", "csi-e2e")
	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", "e2e-sim", "-o", "name")
		return strings.TrimSpace(out) == "node/e2e-sim", "node registered: " + out
	})
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	expect := func(t *testing.T, out string, patterns ...string) {
		t.Helper()
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(out) {
				t.Errorf("output does not match %q:\n%s", p, out)
			}
		}
	}
	manifest := write("csi.yaml", `apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: hostpath.csi.example.com
spec:
  attachRequired: false
  podInfoOnMount: true
  volumeLifecycleModes: [Persistent, Ephemeral]
  tokenRequests:
  - audience: vault
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: e2e-sim
spec:
  drivers:
  - name: hostpath.csi.example.com
    nodeID: e2e-sim
    topologyKeys: [topology.hostpath.csi/node]
    allocatable:
      count: 16
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata:
  name: capacity-e2e-sim
  namespace: csi-e2e
storageClassName: hostpath
capacity: 10Gi
nodeTopology:
  matchLabels:
    topology.hostpath.csi/node: e2e-sim
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: va-e2e
spec:
  attacher: hostpath.csi.example.com
  nodeName: e2e-sim
  source:
    persistentVolumeName: pv-e2e
`)

	t.Run("apply, get, describe, explain", func(t *testing.T) {
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest),
			`csidriver.storage.k8s.io/hostpath.csi.example.com created`, `csinode.storage.k8s.io/e2e-sim created`,
			`csistoragecapacity.storage.k8s.io/capacity-e2e-sim created`, `volumeattachment.storage.k8s.io/va-e2e created`)
		expect(t, c.mustKubectl(ctx, "get", "csidrivers"),
			`NAME\s+ATTACHREQUIRED\s+PODINFOONMOUNT\s+STORAGECAPACITY\s+TOKENREQUESTS\s+REQUIRESREPUBLISH\s+MODES\s+AGE`,
			`hostpath.csi.example.com\s+false\s+true\s+false\s+vault\s+false\s+Persistent,Ephemeral\s`)
		expect(t, c.mustKubectl(ctx, "get", "csinodes"), `NAME\s+DRIVERS\s+AGE`, `e2e-sim\s+1\s`)
		expect(t, c.mustKubectl(ctx, "get", "csistoragecapacities", "-A"),
			`NAMESPACE\s+NAME\s+STORAGECLASSNAME\s+CAPACITY`, `csi-e2e\s+capacity-e2e-sim\s+hostpath\s+10Gi`)
		expect(t, c.mustKubectl(ctx, "get", "volumeattachments"),
			`NAME\s+ATTACHER\s+PV\s+NODE\s+ATTACHED\s+AGE`, `va-e2e\s+hostpath.csi.example.com\s+pv-e2e\s+e2e-sim\s+false\s`)
		expect(t, c.mustKubectl(ctx, "describe", "csinode", "e2e-sim"),
			`Name:\s+e2e-sim`, `hostpath.csi.example.com:`, `Node ID:\s+e2e-sim`, `Allocatables:`, `Count:\s+16`, `Topology Keys:\s+\[topology.hostpath.csi/node\]`)
		expect(t, c.mustKubectl(ctx, "describe", "csidriver", "hostpath.csi.example.com"),
			`Name:\s+hostpath.csi.example.com`, `Attach Required:\s+false`, `Fs Group Policy:\s+ReadWriteOnceWithFSType`)
		expect(t, c.mustKubectl(ctx, "explain", "csidrivers.spec.attachRequired"), `KIND:\s+CSIDriver`, `attachRequired indicates`)
		expect(t, c.mustKubectl(ctx, "explain", "volumeattachments.status"), `KIND:\s+VolumeAttachment`, `attachmentMetadata`)
		// Applied again unchanged, nothing changes.
		expect(t, c.mustKubectl(ctx, "apply", "-f", manifest), `csidriver.storage.k8s.io/hostpath.csi.example.com unchanged`,
			`volumeattachment.storage.k8s.io/va-e2e unchanged`)
	})

	t.Run("immutable fields are refused with kube's message", func(t *testing.T) {
		out, err := c.kubectl(ctx, "patch", "csidriver", "hostpath.csi.example.com", "--type=merge", "-p", `{"spec":{"attachRequired":true}}`)
		if err == nil {
			t.Fatalf("attachRequired changed:\n%s", out)
		}
		expect(t, out, `spec.attachedRequired: Invalid value: true: field is immutable`)
		out, err = c.kubectl(ctx, "patch", "volumeattachment", "va-e2e", "--type=merge", "-p", `{"spec":{"nodeName":"elsewhere"}}`)
		if err == nil {
			t.Fatalf("a VolumeAttachment's spec changed:\n%s", out)
		}
		expect(t, out, `The VolumeAttachment "va-e2e" is invalid: spec: Invalid value: \{.*"nodeName":"elsewhere"\}: field is immutable`)
		// A mutable one changes.
		c.mustKubectl(ctx, "patch", "csidriver", "hostpath.csi.example.com", "--type=merge", "-p", `{"spec":{"storageCapacity":true}}`)
		expect(t, c.mustKubectl(ctx, "get", "csidriver", "hostpath.csi.example.com", "-o", "jsonpath={.spec.storageCapacity} {.metadata.generation}"), `^true 1$`)
	})

	t.Run("volumeattachments/status", func(t *testing.T) {
		vas := c.Client.StorageV1().VolumeAttachments()
		attached, err := vas.Patch(ctx, "va-e2e", types.MergePatchType, []byte(`{"status":{"attached":true}}`), metav1.PatchOptions{}, "status")
		if err != nil || !attached.Status.Attached {
			t.Fatalf("status patch: %v %+v", err, attached)
		}
		c.mustKubectl(ctx, "label", "volumeattachment", "va-e2e", "va-e2e=updated")
		expect(t, c.mustKubectl(ctx, "get", "volumeattachments", "-l", "va-e2e=updated"), `va-e2e\s+hostpath.csi.example.com\s+pv-e2e\s+e2e-sim\s+true\s`)
		expect(t, c.mustKubectl(ctx, "apply", "--server-side", "-f", write("va-ssa.yaml", `apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: va-e2e
  labels:
    applied: "true"
spec:
  attacher: hostpath.csi.example.com
  nodeName: e2e-sim
  source:
    persistentVolumeName: pv-e2e
status:
  attached: false
`)), `volumeattachment.storage.k8s.io/va-e2e serverside-applied`)
		va, err := vas.Get(ctx, "va-e2e", metav1.GetOptions{})
		if err != nil || !va.Status.Attached || va.Labels["applied"] != "true" {
			t.Errorf("after apply: %v %+v", err, va)
		}
		va.Status.Attached = false
		if va, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil || va.Status.Attached {
			t.Errorf("status update: %v %+v", err, va)
		}
	})

	t.Run("delete", func(t *testing.T) {
		c.mustKubectl(ctx, "delete", "-f", manifest)
		for _, kind := range []string{"csidrivers", "csinodes", "volumeattachments"} {
			if out := c.mustKubectl(ctx, "get", kind, "-o", "name"); strings.TrimSpace(out) != "" {
				t.Errorf("%s left: %s", kind, out)
			}
		}
		list, err := c.Client.StorageV1().CSIStorageCapacities("").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Errorf("capacities left: %v %+v", err, list)
		}
	})
}
