package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	kubetypes "skiff.dev/services/kubelet/types"
)

const staticManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
`

// fileSource returns a file source over dir for node "node-a" and the updates
// it sent, in order.
func fileSource(dir string) (*sourceFile, *[]PodUpdate) {
	var updates []PodUpdate
	s := &sourceFile{path: dir, nodeName: "node-a", logger: slog.Default(),
		send: func(u PodUpdate) { updates = append(updates, u) },
		pods: map[types.UID]*v1.Pod{}, seen: make(chan struct{})}
	return s, &updates
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceAddsChangesAndRemovesStaticPods(t *testing.T) {
	dir := t.TempDir()
	s, updates := fileSource(dir)

	s.sync()
	if len(*updates) != 0 {
		t.Fatalf("an empty directory sent %+v", *updates)
	}
	select {
	case <-s.seen:
	default:
		t.Fatal("the first snapshot must mark the source seen, even when empty")
	}

	write(t, filepath.Join(dir, "web.yaml"), staticManifest)
	write(t, filepath.Join(dir, ".hidden.yaml"), staticManifest)
	write(t, filepath.Join(dir, "broken.yaml"), "kind: [")
	s.sync()
	if len(*updates) != 1 || (*updates)[0].Op != ADD || len((*updates)[0].Pods) != 1 {
		t.Fatalf("after dropping a manifest: %+v, want one ADD", *updates)
	}
	pod := (*updates)[0].Pods[0]
	switch {
	case pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "node-a":
		t.Errorf("name %s/%s node %s, want default/web-node-a on node-a", pod.Namespace, pod.Name, pod.Spec.NodeName)
	case pod.UID == "" || pod.Annotations[kubetypes.ConfigHashAnnotationKey] != string(pod.UID):
		t.Errorf("UID %q, config.hash %q: want the hash as UID", pod.UID, pod.Annotations[kubetypes.ConfigHashAnnotationKey])
	case pod.Annotations[kubetypes.ConfigSourceAnnotationKey] != "file" || pod.Annotations[kubetypes.ConfigFirstSeenAnnotationKey] == "":
		t.Errorf("annotations %v", pod.Annotations)
	case pod.Spec.RestartPolicy != v1.RestartPolicyAlways || pod.Spec.TerminationGracePeriodSeconds == nil:
		t.Errorf("not defaulted: %+v", pod.Spec)
	case !kubetypes.IsStaticPod(pod):
		t.Error("a pod from a file must be a static pod")
	}

	s.sync()
	if len(*updates) != 1 {
		t.Fatalf("an unchanged directory sent %+v", (*updates)[1:])
	}

	write(t, filepath.Join(dir, "web.yaml"), staticManifest+"    workingDir: /tmp\n")
	s.sync()
	if len(*updates) != 3 || (*updates)[1].Op != REMOVE || (*updates)[1].Pods[0].UID != pod.UID || (*updates)[2].Op != ADD {
		t.Fatalf("after changing the manifest: %+v, want REMOVE of the old pod then ADD", (*updates)[1:])
	}
	changed := (*updates)[2].Pods[0]
	if changed.UID == pod.UID || changed.Name != pod.Name {
		t.Errorf("changed manifest: UID %s (old %s), name %s", changed.UID, pod.UID, changed.Name)
	}

	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	s.sync()
	if len(*updates) != 4 || (*updates)[3].Op != REMOVE || (*updates)[3].Pods[0].UID != changed.UID {
		t.Fatalf("after removing the manifest: %+v, want REMOVE", (*updates)[3:])
	}
}

func TestReadStaticPodRefusesWhatIsNotAValidPod(t *testing.T) {
	for name, content := range map[string]string{
		"wrong kind":    "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n",
		"no containers": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec: {}\n",
		"unknown field": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containerz: []\n",
		"no name":       "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: i}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.yaml")
			write(t, path, content)
			if pod, err := readStaticPod(path, "n"); err == nil {
				t.Errorf("accepted %+v", pod)
			}
		})
	}
}
