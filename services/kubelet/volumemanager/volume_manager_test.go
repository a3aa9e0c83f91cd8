package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/token"
	"skiff.dev/services/kubelet/volume"
)

func newTestManager(t *testing.T) (*VolumeManager, kubernetes.Interface, *record.FakeRecorder) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("secret volumes live on a tmpfs, which needs root to mount")
	}
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	// client-go's FakeRecorder: the events are what the test reads.
	recorder := record.NewFakeRecorder(100)
	vm, err := New(Config{PodsDir: filepath.Join(t.TempDir(), "pods"), Client: client, Tokens: token.NewManager(client), Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	return vm, client, recorder
}

func testPod(uid types.UID, volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "default", UID: uid, ResourceVersion: "1", Labels: map[string]string{"v": "1"}},
		Spec:       v1.PodSpec{Volumes: volumes},
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMountRemountAndUnmount(t *testing.T) {
	vm, client, _ := newTestManager(t)
	ctx := context.Background()
	sec, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v1")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	pod := testPod("uid-1",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}},
		v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		}}}},
	)
	if err := vm.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got := vm.GetMountedVolumesForPod(pod.UID)
	want := map[string]MountedVolume{
		"scratch": {Path: filepath.Join(vm.podsDir, "uid-1/volumes/kubernetes.io~empty-dir/scratch")},
		"creds":   {Path: filepath.Join(vm.podsDir, "uid-1/volumes/kubernetes.io~secret/creds"), ReadOnly: true},
		"host":    {Path: hostDir},
		"info":    {Path: filepath.Join(vm.podsDir, "uid-1/volumes/kubernetes.io~downward-api/info"), ReadOnly: true},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("volume %s = %+v, want %+v", name, got[name], w)
		}
	}

	// The periodic remount picks up a changed Secret...
	sec.Data = map[string][]byte{"k": []byte("v2")}
	if _, err := client.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vm.remountAll(ctx)
	if s := readFile(t, filepath.Join(want["creds"].Path, "k")); s != "v2" {
		t.Errorf("after remount k = %q, want v2", s)
	}
	// ...and a changed pod object reaches its downwardAPI volume at the next
	// WaitForAttachAndMount.
	updated := pod.DeepCopy()
	updated.ResourceVersion, updated.Labels = "2", map[string]string{"v": "2"}
	if err := vm.WaitForAttachAndMount(ctx, updated); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, filepath.Join(want["info"].Path, "labels")); s != `v="2"` {
		t.Errorf("labels file = %q after the pod's labels changed", s)
	}

	if err := vm.WaitForUnmount(ctx, updated); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(vm.podsDir, "uid-1")); !os.IsNotExist(err) {
		t.Errorf("pod directory survives WaitForUnmount: %v", err)
	}
	if mounts, _ := mountsUnder(vm.podsDir); len(mounts) != 0 {
		t.Errorf("mounts left: %v", mounts)
	}
	if _, err := os.Stat(hostDir); err != nil {
		t.Errorf("the hostPath itself was removed: %v", err)
	}
	if v := vm.GetMountedVolumesForPod(pod.UID); v != nil {
		t.Errorf("volumes still reported after unmount: %v", v)
	}
}

func TestFailedMountNamesTheVolumeAndRecordsAnEvent(t *testing.T) {
	vm, _, recorder := newTestManager(t)
	pod := testPod("uid-2",
		v1.Volume{Name: "ok", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "missing"}}},
	)
	err := vm.WaitForAttachAndMount(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "unmounted volumes=[data cfg]") {
		t.Fatalf("err = %v, want unmounted volumes=[data cfg]", err)
	}
	if !strings.Contains(err.Error(), `failed to fetch PVC from API server: persistentvolumeclaims "c" not found`) {
		t.Errorf("err = %v, want the missing claim named", err)
	}
	var events []string
	for len(recorder.Events) > 0 {
		events = append(events, <-recorder.Events)
	}
	joined := strings.Join(events, "\n")
	for _, want := range []string{`Warning FailedMount MountVolume.SetUp failed for volume "data"`, `Warning FailedMount MountVolume.SetUp failed for volume "cfg" : secrets "missing" not found`} {
		if !strings.Contains(joined, want) {
			t.Errorf("events %q lack %q", events, want)
		}
	}
	if _, ok := vm.GetMountedVolumesForPod(pod.UID)["ok"]; !ok {
		t.Error("the volume that could be set up is not reported")
	}
	if err := vm.WaitForUnmount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// TestPersistentVolumeClaimVolumes: a claim Bound to a hostPath or local volume is
// mounted as that path (read-only when the pod's volume says so); an unbound claim
// holds the pod back with kube's message.
func TestPersistentVolumeClaimVolumes(t *testing.T) {
	vm, client, recorder := newTestManager(t)
	ctx := context.Background()
	hostDir, localDir := t.TempDir(), t.TempDir()
	bind := func(claim, volume string, source v1.PersistentVolumeSource) {
		t.Helper()
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Create(ctx, &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, VolumeName: volume,
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = v1.ClaimBound
		if _, err := client.CoreV1().PersistentVolumeClaims("default").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: volume}, Spec: v1.PersistentVolumeSpec{
			Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: source, ClaimRef: &v1.ObjectReference{Namespace: "default", Name: claim, UID: pvc.UID},
		}}
		if source.Local != nil {
			pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
		}
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("host", "pv-host", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}})
	bind("local", "pv-local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: localDir}})
	claimVolume := func(name, claim string, readOnly bool) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
	}
	pod := testPod("uid-pvc", claimVolume("data", "host", false), claimVolume("cache", "local", true))
	if err := vm.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mounted := vm.GetMountedVolumesForPod(pod.UID)
	if got := mounted["data"]; got.Path != hostDir || got.ReadOnly {
		t.Errorf("data mounted as %+v, want %s read-write", got, hostDir)
	}
	if got := mounted["cache"]; got.Path != localDir || !got.ReadOnly {
		t.Errorf("cache mounted as %+v, want %s read-only", got, localDir)
	}
	if err := vm.WaitForUnmount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hostDir); err != nil {
		t.Errorf("the volume's directory was removed: %v", err)
	}

	if _, err := client.CoreV1().PersistentVolumeClaims("default").Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := testPod("uid-pending", claimVolume("data", "pending", false))
	err := vm.WaitForAttachAndMount(ctx, waiting)
	want := `PVC default/pending has non-bound phase ("Pending") or empty pvc.Spec.VolumeName ("")`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if e := <-recorder.Events; !strings.Contains(e, "Warning FailedMount") || !strings.Contains(e, want) {
		t.Errorf("event %q", e)
	}
}

func TestCleanupOrphanedPodDirs(t *testing.T) {
	vm, _, _ := newTestManager(t)
	ctx := context.Background()
	mem := v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}
	for _, uid := range []types.UID{"orphan", "kept"} {
		if err := vm.WaitForAttachAndMount(ctx, testPod(uid, mem)); err != nil {
			t.Fatal(err)
		}
	}
	// A new kubelet knows of no pod: everything on disk is a leftover.
	fresh, err := New(Config{PodsDir: vm.podsDir, Client: vm.client, Tokens: vm.tokens})
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(vm.podsDir, "default_web_orphan")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fresh.CleanupOrphanedPodDirs(map[types.UID]bool{"kept": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(vm.podsDir, "orphan")); !os.IsNotExist(err) {
		t.Errorf("orphaned pod directory survives: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vm.podsDir, "kept", "volumes")); err != nil {
		t.Errorf("a kept pod's volumes were removed: %v", err)
	}
	if _, err := os.Stat(logDir); err != nil {
		t.Errorf("a pod log directory was taken for a pod directory: %v", err)
	}
	if err := fresh.CleanupOrphanedPodDirs(nil); err != nil {
		t.Fatal(err)
	}
	if mounts, _ := mountsUnder(vm.podsDir); len(mounts) != 0 {
		t.Errorf("mounts left: %v", mounts)
	}
}

func TestUnmountAllLeavesNoMount(t *testing.T) {
	vm, _, _ := newTestManager(t)
	mem := v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}
	if err := vm.WaitForAttachAndMount(context.Background(), testPod("uid-u", mem)); err != nil {
		t.Fatal(err)
	}
	if mounts, _ := mountsUnder(vm.podsDir); len(mounts) != 1 {
		t.Fatalf("mounts before = %v, want the tmpfs", mounts)
	}
	if err := UnmountAll(vm.podsDir); err != nil {
		t.Fatal(err)
	}
	if mounts, _ := mountsUnder(vm.podsDir); len(mounts) != 0 {
		t.Errorf("mounts left: %v", mounts)
	}
}

// TestPodDirectoryIsNeverRemovedThroughAMount: a tmpfs still mounted in a pod's
// directory stops its removal, and what is on it survives.
func TestPodDirectoryIsNeverRemovedThroughAMount(t *testing.T) {
	dir := t.TempDir()
	podDir := filepath.Join(dir, "uid-m")
	mounted := filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "mem")
	if err := (volume.NodeMounter{}).SetUpTmpfs(mounted, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mounted, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mounted, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(podDir, "etc-hosts"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := removeAllOneFilesystem(podDir)
	if err == nil || !strings.Contains(err.Error(), "mount point") {
		t.Fatalf("removing a pod directory with a mount in it: %v, want a mount point error", err)
	}
	if _, err := os.Stat(filepath.Join(mounted, "data")); err != nil {
		t.Errorf("a file on the mount was removed: %v", err)
	}
	if err := unix.Unmount(mounted, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := removeAllOneFilesystem(podDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory survives: %v", err)
	}
}

func TestPodFSGroupOwnsItsVolumes(t *testing.T) {
	vm, client, _ := newTestManager(t)
	ctx := context.Background()
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := testPod("uid-g",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "g"}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: t.TempDir()}}},
	)
	fsGroup := int64(5151)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &fsGroup}
	if err := vm.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.WaitForUnmount(ctx, pod) })
	vols := vm.GetMountedVolumesForPod(pod.UID)
	gid := func(path string) uint32 {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return info.Sys().(*syscall.Stat_t).Gid
	}
	if g := gid(vols["scratch"].Path); g != 5151 {
		t.Errorf("emptyDir group = %d, want the fsGroup", g)
	}
	if g := gid(filepath.Join(vols["creds"].Path, "k")); g != 5151 {
		t.Errorf("secret file group = %d, want the fsGroup", g)
	}
	if g := gid(vols["host"].Path); g == 5151 {
		t.Error("a hostPath was re-grouped: it is the node's, not the pod's")
	}
}
