package kubelet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/cri/sim"
	"skiff.dev/services/kubelet"
)

const staticManifest = `apiVersion: v1
kind: Pod
metadata:
  name: static-web
  labels: {app: static}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
`

// TestStaticPodsRunFromFilesWithMirrorPods runs a kubelet with a manifest
// directory, as node-1 itself (so NodeRestriction admits its mirror pods):
// the manifest's pod runs and shows in the API as a mirror pod that comes
// back when deleted, follows a changed manifest, and goes with the file.
func TestStaticPodsRunFromFilesWithMirrorPods(t *testing.T) {
	ctx := context.Background()
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	nodeConfig := srv.ClientConfig("system:node:"+nodeName, "system:nodes")
	nodeClient := kubernetes.NewForConfigOrDie(nodeConfig)
	cri := startSim(t)

	manifests := t.TempDir()
	manifest := filepath.Join(manifests, "web.yaml")
	if err := os.WriteFile(manifest, []byte(staticManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kl, err := kubelet.New(kubelet.Config{
		NodeName: nodeName, Client: nodeClient, RuntimeEndpoint: cri.Socket, RootDir: rootDir(t),
		NodeIP: "10.1.2.3", PodManifestPath: manifests, FileCheckFrequency: 100 * time.Millisecond, PodCIDR: sim.PodCIDR,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- kl.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	mirrorName := "static-web-" + nodeName
	getMirror := func() (*v1.Pod, error) {
		return admin.CoreV1().Pods("default").Get(ctx, mirrorName, metav1.GetOptions{})
	}
	var first *v1.Pod
	eventually(t, 60*time.Second, "mirror pod Running", func() error {
		pod, err := getMirror()
		if err != nil {
			return err
		}
		hash := pod.Annotations["kubernetes.io/config.hash"]
		switch {
		case hash == "" || pod.Annotations["kubernetes.io/config.mirror"] != hash:
			return fmt.Errorf("annotations %v", pod.Annotations)
		case pod.Annotations["kubernetes.io/config.source"] != "file":
			return fmt.Errorf("annotations %v", pod.Annotations)
		case len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Node" || pod.OwnerReferences[0].Name != nodeName:
			return fmt.Errorf("owner references %+v", pod.OwnerReferences)
		case pod.Status.Phase != v1.PodRunning:
			return fmt.Errorf("phase %q", pod.Status.Phase)
		}
		first = pod
		return nil
	})
	containerID := first.Status.ContainerStatuses[0].ContainerID

	// Deleted by a user, the mirror comes back; the static pod never stopped.
	if err := admin.CoreV1().Pods("default").Delete(ctx, mirrorName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "mirror pod recreated", func() error {
		pod, err := getMirror()
		if err != nil {
			return err
		}
		if pod.UID == first.UID || pod.DeletionTimestamp != nil || pod.Status.Phase != v1.PodRunning {
			return fmt.Errorf("uid %s (first %s) deleting %v phase %s", pod.UID, first.UID, pod.DeletionTimestamp, pod.Status.Phase)
		}
		if got := pod.Status.ContainerStatuses[0].ContainerID; got != containerID {
			return fmt.Errorf("container %s, want the static pod's %s still running", got, containerID)
		}
		return nil
	})

	// A changed manifest is a new static pod, with a new mirror.
	changed := staticManifest + "    workingDir: /tmp\n"
	if err := os.WriteFile(manifest, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "mirror pod of the changed manifest", func() error {
		pod, err := getMirror()
		if err != nil {
			return err
		}
		if pod.Annotations["kubernetes.io/config.mirror"] == first.Annotations["kubernetes.io/config.mirror"] || pod.Status.Phase != v1.PodRunning {
			return fmt.Errorf("hash %s phase %s", pod.Annotations["kubernetes.io/config.mirror"], pod.Status.Phase)
		}
		return nil
	})

	// The file goes: so do the pod and its mirror.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "mirror pod deleted", func() error {
		pod, err := getMirror()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("mirror pod still there, phase " + string(pod.Status.Phase))
	})

	// A node may create no other pod than its own mirror pods.
	plain := newPod("not-a-mirror", v1.RestartPolicyAlways, nil)
	if _, err := nodeClient.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node creating a plain pod: %v, want Forbidden", err)
	}
	// Nor a mirror pod owned by anything but itself.
	for name, owner := range map[string]metav1.OwnerReference{
		"another node":      {APIVersion: "v1", Kind: "Node", Name: "node-2", UID: "u", Controller: ptr.To(true)},
		"not as controller": {APIVersion: "v1", Kind: "Node", Name: nodeName, UID: "u"},
		"a ReplicaSet":      {APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: ptr.To(true)},
	} {
		mirror := newPod("mirror-owned-by-"+strings.ReplaceAll(name, " ", "-"), v1.RestartPolicyAlways,
			map[string]string{v1.MirrorPodAnnotationKey: "x"})
		mirror.OwnerReferences = []metav1.OwnerReference{owner}
		if _, err := nodeClient.CoreV1().Pods("default").Create(ctx, mirror, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node creating a mirror pod owned by %s: %v, want Forbidden", name, err)
		}
	}
}
