package containerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The provisioner deploy/local-path-provisioner.yaml runs, and the images it names, as
// containerd normalizes them.
const (
	localPathVersion     = "v0.0.30"
	localPathImage       = "docker.io/rancher/local-path-provisioner:" + localPathVersion
	localPathHelperImage = "docker.io/library/busybox:latest"
	localPathManifest    = "../../deploy/local-path-provisioner.yaml"
	localPathDefaultDir  = "/opt/local-path-provisioner"
)

// loadLocalPathImages builds local-path-provisioner from the Go module proxy (as
// deploy/offline/build.sh does) and imports it and busybox into skiff's containerd
// under the names the manifest uses.
func loadLocalPathImages(ctx context.Context, t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "install", "-ldflags", "-s -w -X main.VERSION="+localPathVersion,
		"github.com/rancher/local-path-provisioner@"+localPathVersion)
	build.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-trimpath")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building local-path-provisioner: %v\n%s", err, out)
	}
	provisioner, err := binaryLayer(filepath.Join(dir, "local-path-provisioner"), "/usr/bin/local-path-provisioner")
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := busyboxLayer("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	archive := filepath.Join(dir, "images.tar")
	if err := writeImages(archive, []ociImage{
		{name: localPathImage, layer: provisioner, cmd: []string{"local-path-provisioner"}, env: []string{"PATH=" + path}},
		{name: localPathHelperImage, layer: busybox, cmd: []string{"sh"}, env: []string{"PATH=" + path}},
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "ctr", "-a", skiff.socket, "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// applyLocalPath applies the shipped manifest with the provisioner's node path moved to
// hostDir (the only change: the test must leave nothing on the host), and waits for the
// provisioner to run.
func applyLocalPath(ctx context.Context, t *testing.T, hostDir string) {
	t.Helper()
	manifest, err := os.ReadFile(localPathManifest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), localPathDefaultDir) {
		t.Fatalf("%s does not name %s", localPathManifest, localPathDefaultDir)
	}
	apply := kubectlCmd(ctx, nil, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(strings.ReplaceAll(string(manifest), localPathDefaultDir, hostDir))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	mustKubectl(ctx, t, "-n", "local-path-storage", "rollout", "status", "deployment/local-path-provisioner", "--timeout=120s")
}

func claimWithoutClass(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
}

// claimPod is a busybox pod that runs script once with the claim at /data.
func claimPod(name, claim, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

// runToCompletion creates the pod, waits for it to succeed, and returns its log.
func runToCompletion(ctx context.Context, t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	if _, err := skiff.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		p, err := getPod(ctx, pod.Name)
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %+v", pod.Name, p.Status)
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("pod %s: %s %+v %+v", pod.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return mustKubectl(ctx, t, "logs", pod.Name)
}

func deletePod(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if err := skiff.client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() (bool, string) {
		_, err := getPod(ctx, name)
		return apierrors.IsNotFound(err), fmt.Sprintf("pod %s still there (%v)", name, err)
	})
}

// boundVolume waits until the claim is Bound and returns its volume.
func boundVolume(ctx context.Context, t *testing.T, claim string) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	eventually(t, 2*time.Minute, func() (bool, string) {
		pvc, err := skiff.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return false, fmt.Sprintf("claim %s %s, annotations %v", claim, pvc.Status.Phase, pvc.Annotations)
		}
		pv, err = skiff.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, fmt.Sprintf("volume %s: %v", pvc.Spec.VolumeName, err)
	})
	return pv
}

// deleteClaimAndWaitForCleanup deletes the claim and waits until the provisioner has
// deleted its volume and the volume's directory on the host.
func deleteClaimAndWaitForCleanup(ctx context.Context, t *testing.T, claim string, pv *corev1.PersistentVolume) {
	t.Helper()
	if err := skiff.client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		got, err := skiff.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err == nil {
			return false, fmt.Sprintf("volume %s still there: %s", pv.Name, got.Status.Phase)
		}
		return apierrors.IsNotFound(err), err.Error()
	})
	if _, err := os.Stat(pv.Spec.HostPath.Path); !os.IsNotExist(err) {
		t.Errorf("the volume's directory %s is still on the host (%v)", pv.Spec.HostPath.Path, err)
	}
}

// TestLocalPathProvisioner: the shipped local-path-provisioner manifest gives skiff a
// working default class. A claim without a class gets local-path, waits for its first
// consumer, is provisioned on the node the scheduler picks, bound and mounted; what one
// pod writes, the next pod of the claim reads; deleting the claim deletes the volume
// and its directory on the host. A StatefulSet's volumeClaimTemplates get volumes the
// same way.
func TestLocalPathProvisioner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	hostDir := t.TempDir()
	loadLocalPathImages(ctx, t)
	applyLocalPath(ctx, t, hostDir)
	t.Cleanup(func() {
		if t.Failed() {
			// What the claims, volumes, events and the provisioner say.
			for _, args := range [][]string{
				{"get", "pvc,pv,pods", "-A", "-o", "wide"},
				{"get", "events", "-A"},
				{"-n", "local-path-storage", "logs", "deployment/local-path-provisioner", "--tail=100"},
			} {
				out, _ := kubectl(context.Background(), args...)
				t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
			}
		}
		out, err := kubectl(context.Background(), "delete", "-f", localPathManifest, "--ignore-not-found", "--wait=false")
		if err != nil {
			t.Logf("kubectl delete -f %s: %v\n%s", localPathManifest, err, out)
		}
	})
	if out := mustKubectl(ctx, t, "get", "storageclass", "local-path", "-o", `jsonpath={.metadata.annotations.storageclass\.kubernetes\.io/is-default-class} {.volumeBindingMode} {.reclaimPolicy}`); out != "true WaitForFirstConsumer Delete" {
		t.Fatalf("local-path class: %q", out)
	}

	t.Run("a claim is provisioned, kept across pods, and cleaned up", func(t *testing.T) {
		pvc, err := skiff.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, claimWithoutClass("lp-data"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != "local-path" {
			t.Fatalf("claim's class %q, want the default local-path", got)
		}
		// No consumer yet: the claim waits, as kube's controller says.
		eventually(t, time.Minute, func() (bool, string) {
			out, err := kubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=lp-data", "-o", "jsonpath={.items[*].reason}")
			return err == nil && strings.Contains(out, "WaitForFirstConsumer"), out
		})

		runToCompletion(ctx, t, claimPod("lp-writer", "lp-data", "echo kept > /data/greeting"))
		pv := boundVolume(ctx, t, "lp-data")
		pvc, err = skiff.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "lp-data", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Annotations["volume.kubernetes.io/selected-node"] != "e2e-containerd" ||
			pvc.Annotations["volume.kubernetes.io/storage-provisioner"] != "rancher.io/local-path" {
			t.Errorf("claim annotations %v", pvc.Annotations)
		}
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != "rancher.io/local-path" || pv.Spec.HostPath == nil ||
			!strings.HasPrefix(pv.Spec.HostPath.Path, hostDir+"/") || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			t.Fatalf("provisioned volume %+v", pv)
		}
		if data, err := os.ReadFile(filepath.Join(pv.Spec.HostPath.Path, "greeting")); err != nil || string(data) != "kept\n" {
			t.Errorf("the file on the host: %q %v", data, err)
		}
		deletePod(ctx, t, "lp-writer")

		if out := runToCompletion(ctx, t, claimPod("lp-reader", "lp-data", "cat /data/greeting")); out != "kept\n" {
			t.Errorf("the next pod read %q, want %q", out, "kept\n")
		}
		deletePod(ctx, t, "lp-reader")
		deleteClaimAndWaitForCleanup(ctx, t, "lp-data", pv)
	})

	t.Run("a StatefulSet's claim templates get volumes", func(t *testing.T) {
		labels := map[string]string{"app": "lp-web"}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "lp-web"},
			Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To(int32(2)),
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To(int64(1)),
						Containers: []corev1.Container{{Name: "c", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
							Command:      []string{"sh", "-c", "hostname > /data/name; exec sleep 3600"},
							VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
					},
				},
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{*claimWithoutClass("data")},
			},
		}
		if _, err := skiff.client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		volumes := map[string]*corev1.PersistentVolume{}
		for _, pod := range []string{"lp-web-0", "lp-web-1"} {
			waitRunning(ctx, t, pod)
			claim := "data-" + pod
			pv := boundVolume(ctx, t, claim)
			volumes[claim] = pv
			eventually(t, 30*time.Second, func() (bool, string) {
				data, err := os.ReadFile(filepath.Join(pv.Spec.HostPath.Path, "name"))
				return err == nil && string(data) == pod+"\n", fmt.Sprintf("%s's volume holds %q (%v)", pod, data, err)
			})
		}
		if volumes["data-lp-web-0"].Name == volumes["data-lp-web-1"].Name {
			t.Fatalf("both pods got volume %s", volumes["data-lp-web-0"].Name)
		}
		if err := skiff.client.AppsV1().StatefulSets("default").Delete(ctx, "lp-web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, pod := range []string{"lp-web-0", "lp-web-1"} {
			eventually(t, 2*time.Minute, func() (bool, string) {
				_, err := getPod(ctx, pod)
				return apierrors.IsNotFound(err), fmt.Sprintf("pod %s still there (%v)", pod, err)
			})
		}
		// The claims outlive the StatefulSet (retention policy Retain); deleting them
		// deletes their volumes.
		for claim, pv := range volumes {
			deleteClaimAndWaitForCleanup(ctx, t, claim, pv)
		}
	})
}
