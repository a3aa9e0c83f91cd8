package scheduler

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/volume/persistentvolume"
	"skiff.dev/services/internal/eventrecorder"
)

// startPVController runs kube-controller-manager's PV binder against client until the
// test ends.
func startPVController(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	binder := persistentvolume.New(factory, client, eventrecorder.Nop{})
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { binder.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

func hostNode(name string) *v1.Node {
	n := testNode(name, "4")
	n.Labels = map[string]string{v1.LabelHostname: name}
	return n
}

func claimOf(name, class string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To(class),
		},
	}
}

func volumeOn(name, class, node string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp/" + name}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
	}
}

func podUsing(name string, claims ...string) *v1.Pod {
	pod := testPod(name, "100m")
	pod.UID = ""
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: c,
			VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return pod
}

// provisionLikeAnExternalProvisioner plays sig-storage-lib-external-provisioner for
// one claim: once the PV controller hands it the claim (storage-provisioner) and the
// scheduler has chosen a node (selected-node), it creates a volume on that node whose
// claimRef names the claim.
func provisionLikeAnExternalProvisioner(t *testing.T, client kubernetes.Interface, claimName, provisioner string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "claim "+claimName+" handed to the provisioner with a node", func() (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node := pvc.Annotations[volume.AnnSelectedNode]
		if pvc.Annotations[volume.AnnStorageProvisioner] != provisioner || node == "" {
			return false, nil
		}
		pv := volumeOn("pvc-"+string(pvc.UID), *pvc.Spec.StorageClassName, node)
		pv.Annotations = map[string]string{volume.AnnDynamicallyProvisioned: provisioner}
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "default", Name: claimName, UID: pvc.UID}
		_, err = client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		return err == nil, err
	})
}

// TestVolumeBinding: on a real apiserver with the real PV controller, a pod's
// WaitForFirstConsumer claim is bound to the static volume on the node that has one,
// or provisioned on the node the scheduler picks; a pod whose claim is missing or
// unbound Immediate waits with kube's message and is scheduled once its claim is bound.
func TestVolumeBinding(t *testing.T) {
	client := newClient(t, hostNode("a"), hostNode("b"))
	ctx := context.Background()
	startPVController(t, client)
	s, err := newScheduler(Config{Client: client}, fastOptions(t), func(o *options) { o.volumeBindTimeout = 30 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run(t, s))
	create := func(obj any) {
		t.Helper()
		var err error
		switch o := obj.(type) {
		case *storagev1.StorageClass:
			_, err = client.StorageV1().StorageClasses().Create(ctx, o, metav1.CreateOptions{})
		case *v1.PersistentVolume:
			_, err = client.CoreV1().PersistentVolumes().Create(ctx, o, metav1.CreateOptions{})
		case *v1.PersistentVolumeClaim:
			_, err = client.CoreV1().PersistentVolumeClaims("default").Create(ctx, o, metav1.CreateOptions{})
		case *v1.Pod:
			_, err = client.CoreV1().Pods("default").Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	wffc := ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: volume.NotSupportedProvisioner, VolumeBindingMode: wffc})
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-path"}, Provisioner: "rancher.io/local-path", VolumeBindingMode: wffc})
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "example.com/disk"})

	t.Run("a static volume binds on the node it is on", func(t *testing.T) {
		create(volumeOn("pv-on-b", "local", "b"))
		create(claimOf("static", "local"))
		create(podUsing("static-user", "static"))
		if node := waitBound(t, client, "static-user"); node != "b" {
			t.Fatalf("pod on %q, want b, where its volume is", node)
		}
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "static", metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName != "pv-on-b" || pvc.Status.Phase != v1.ClaimBound {
			t.Fatalf("claim: %v %+v", err, pvc)
		}
		// No volume left for a second claim of the class, which cannot provision.
		create(claimOf("static-2", "local"))
		create(podUsing("static-user-2", "static-2"))
		waitUnschedulable(t, client, "static-user-2", "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
	})

	t.Run("a claim is provisioned on the node chosen for its pod", func(t *testing.T) {
		create(claimOf("dynamic", "local-path"))
		create(podUsing("dynamic-user", "dynamic"))
		provisionLikeAnExternalProvisioner(t, client, "dynamic", "rancher.io/local-path")
		node := waitBound(t, client, "dynamic-user")
		pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "dynamic", metav1.GetOptions{})
		if err != nil || pvc.Annotations[volume.AnnSelectedNode] != node || pvc.Spec.VolumeName != "pvc-"+string(pvc.UID) {
			t.Fatalf("claim of a pod on %s: %v %+v", node, err, pvc)
		}
		// The next pod of the claim goes where its volume now is.
		create(podUsing("dynamic-user-2", "dynamic"))
		if got := waitBound(t, client, "dynamic-user-2"); got != node {
			t.Fatalf("second pod of the claim on %q, want %q", got, node)
		}
	})

	t.Run("a missing or unbound immediate claim keeps the pod pending", func(t *testing.T) {
		create(podUsing("missing-user", "missing"))
		waitUnschedulable(t, client, "missing-user", `0/2 nodes are available: persistentvolumeclaim "missing" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.`)
		create(claimOf("immediate", "standard"))
		create(podUsing("immediate-user", "immediate"))
		waitUnschedulable(t, client, "immediate-user", "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
		// A volume for it: the PV controller binds the claim, the pod is scheduled.
		create(volumeOn("pv-on-a", "standard", "a"))
		if node := waitBound(t, client, "immediate-user"); node != "a" {
			t.Fatalf("pod on %q, want a, where its volume is", node)
		}
	})
}
