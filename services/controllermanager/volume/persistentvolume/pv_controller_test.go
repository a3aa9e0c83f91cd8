package persistentvolume_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/volume/persistentvolume"
	"skiff.dev/services/controllermanager/volume/pvcprotection"
	"skiff.dev/services/controllermanager/volume/pvprotection"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver (with the namespace and service account controllers) and
// the PV binder and both protection controllers against it.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: persistentvolume.EventSource, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	binder := persistentvolume.New(factory, cs, recorder)
	pvcProtection := pvcprotection.New(factory, cs)
	pvProtection := pvprotection.New(factory, cs)
	factory.Start(ctx.Done())
	done := make(chan struct{}, 3)
	go func() { binder.Run(ctx); done <- struct{}{} }()
	go func() { pvcProtection.Run(ctx, 1); done <- struct{}{} }()
	go func() { pvProtection.Run(ctx, 1); done <- struct{}{} }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done; factory.Shutdown() })
	return cs
}

func newPV(name, size string, policy corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"size": size}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: policy,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
}

func newPVC(name, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: ptr.To(""),
		},
	}
}

// eventually polls cond every 100ms for up to a minute (the controllers are
// event-driven; the bound is only against a hang).
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func create[T any](t *testing.T, f func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := f(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitBound waits until claim is Bound to volume on both sides and returns both.
func waitBound(t *testing.T, cs kubernetes.Interface, ns, claim, volume string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	var pv *corev1.PersistentVolume
	eventually(t, claim+" bound to "+volume, func() (bool, error) {
		var err error
		if pvc, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{}); err != nil {
			return false, err
		}
		if pv, err = cs.CoreV1().PersistentVolumes().Get(context.Background(), volume, metav1.GetOptions{}); err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound && pv.Status.Phase == corev1.VolumeBound, nil
	})
	if pvc.Spec.VolumeName != volume || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("claim %s volumeName %q, volume %s claimRef %+v", claim, pvc.Spec.VolumeName, volume, pv.Spec.ClaimRef)
	}
	return pvc, pv
}

func waitPhase(t *testing.T, cs kubernetes.Interface, volume string, phase corev1.PersistentVolumePhase) {
	t.Helper()
	eventually(t, volume+" "+string(phase), func() (bool, error) {
		pv, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), volume, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == phase, err
	})
}

func waitGone(t *testing.T, what string, get func() error) {
	t.Helper()
	eventually(t, what+" gone", func() (bool, error) {
		err := get()
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// TestStaticBinding: a claim binds to the smallest volume that fits, with kube's
// annotations, status and protection finalizers; a claim naming a volume and a volume
// naming a claim bind to each other; a claim nothing fits stays Pending.
func TestStaticBinding(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	pvs, pvcs := cs.CoreV1().PersistentVolumes(), cs.CoreV1().PersistentVolumeClaims("default")
	for _, pv := range []*corev1.PersistentVolume{newPV("small", "1Gi", ""), newPV("medium", "5Gi", ""), newPV("large", "10Gi", "")} {
		create(t, pvs.Create, pv)
	}
	for _, name := range []string{"small", "medium", "large"} {
		waitPhase(t, cs, name, corev1.VolumeAvailable)
	}

	create(t, pvcs.Create, newPVC("three-gigs", "3Gi"))
	pvc, pv := waitBound(t, cs, "default", "three-gigs", "medium")
	if pvc.Annotations[persistentvolume.AnnBindCompleted] != "yes" || pvc.Annotations[persistentvolume.AnnBoundByController] != "yes" ||
		pv.Annotations[persistentvolume.AnnBoundByController] != "yes" {
		t.Errorf("annotations: claim %v volume %v", pvc.Annotations, pv.Annotations)
	}
	if q := pvc.Status.Capacity[corev1.ResourceStorage]; q.String() != "5Gi" || !slices.Equal(pvc.Status.AccessModes, pv.Spec.AccessModes) {
		t.Errorf("claim status %+v", pvc.Status)
	}
	eventually(t, "protection finalizers", func() (bool, error) {
		pvc, err := pvcs.Get(ctx, "three-gigs", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv, err := pvs.Get(ctx, "medium", metav1.GetOptions{})
		return slices.Contains(pvc.Finalizers, pvcprotection.Finalizer) && slices.Contains(pv.Finalizers, pvprotection.Finalizer), err
	})

	// Pre-bound both ways: the claim names "large", and a new volume names a claim.
	claim := newPVC("wants-large", "1Gi")
	claim.Spec.VolumeName = "large"
	create(t, pvcs.Create, claim)
	pvc, pv = waitBound(t, cs, "default", "wants-large", "large")
	if pvc.Annotations[persistentvolume.AnnBoundByController] != "" || pv.Annotations[persistentvolume.AnnBoundByController] != "yes" {
		t.Errorf("pre-bound claim annotations: claim %v volume %v", pvc.Annotations, pv.Annotations)
	}
	reserved := newPV("reserved", "20Gi", "")
	reserved.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "reserved-claim"}
	create(t, pvs.Create, reserved)
	create(t, pvcs.Create, newPVC("reserved-claim", "1Gi"))
	waitBound(t, cs, "default", "reserved-claim", "reserved")

	// Nothing left fits 50Gi: the claim stays Pending with kube's event.
	create(t, pvcs.Create, newPVC("too-big", "50Gi"))
	eventually(t, "FailedBinding event", func() (bool, error) {
		events, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "too-big").String()})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == persistentvolume.FailedBinding && e.Message == "no persistent volumes available for this claim and no storage class is set" {
				return true, nil
			}
		}
		return false, nil
	})
	if pvc, err := pvcs.Get(ctx, "too-big", metav1.GetOptions{}); err != nil || pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
		t.Errorf("too-big: %v %+v", err, pvc)
	}
	if pv, err := pvs.Get(ctx, "small", metav1.GetOptions{}); err != nil || pv.Status.Phase != corev1.VolumeAvailable {
		t.Errorf("small should still be Available: %v %+v", err, pv)
	}
}

// TestReleaseAndProtection: a claim used by a pod outlives its delete until the pod is
// gone; a Bound volume outlives its delete until its claim is gone; a released volume is
// kept (Retain) or deleted (Delete).
func TestReleaseAndProtection(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	pvs, pvcs := cs.CoreV1().PersistentVolumes(), cs.CoreV1().PersistentVolumeClaims("default")
	create(t, pvs.Create, newPV("kept", "1Gi", corev1.PersistentVolumeReclaimRetain))
	waitPhase(t, cs, "kept", corev1.VolumeAvailable)
	create(t, pvcs.Create, newPVC("keep", "1Gi"))
	waitBound(t, cs, "default", "keep", "kept")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "user"},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes:                      []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "keep"}}}},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	create(t, cs.CoreV1().Pods("default").Create, pod)
	eventually(t, "claim finalizer", func() (bool, error) {
		pvc, err := pvcs.Get(ctx, "keep", metav1.GetOptions{})
		return err == nil && slices.Contains(pvc.Finalizers, pvcprotection.Finalizer), err
	})
	eventually(t, "volume finalizer", func() (bool, error) {
		pv, err := pvs.Get(ctx, "kept", metav1.GetOptions{})
		return err == nil && slices.Contains(pv.Finalizers, pvprotection.Finalizer), err
	})
	if err := pvs.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pvcs.Delete(ctx, "keep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod still uses the claim: it stays, being deleted, and its volume Bound.
	pvc, err := pvcs.Get(ctx, "keep", metav1.GetOptions{})
	if err != nil || pvc.DeletionTimestamp == nil {
		t.Fatalf("claim in use: %v %+v", err, pvc)
	}
	if pv, err := pvs.Get(ctx, "kept", metav1.GetOptions{}); err != nil || pv.DeletionTimestamp == nil || pv.Status.Phase != corev1.VolumeBound {
		t.Fatalf("bound volume being deleted: %v %+v", err, pv)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "user", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "claim keep", func() error { _, err := pvcs.Get(ctx, "keep", metav1.GetOptions{}); return err })
	// Released, its finalizer removed: the delete asked for earlier completes.
	waitGone(t, "volume kept", func() error { _, err := pvs.Get(ctx, "kept", metav1.GetOptions{}); return err })

	// Retain: released and kept; Delete: the PersistentVolume is deleted.
	create(t, pvs.Create, newPV("retained", "1Gi", corev1.PersistentVolumeReclaimRetain))
	create(t, pvs.Create, newPV("deleted", "2Gi", corev1.PersistentVolumeReclaimDelete))
	waitPhase(t, cs, "retained", corev1.VolumeAvailable)
	waitPhase(t, cs, "deleted", corev1.VolumeAvailable)
	create(t, pvcs.Create, newPVC("one", "1Gi"))
	waitBound(t, cs, "default", "one", "retained")
	create(t, pvcs.Create, newPVC("two", "2Gi"))
	waitBound(t, cs, "default", "two", "deleted")
	for _, name := range []string{"one", "two"} {
		if err := pvcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPhase(t, cs, "retained", corev1.VolumeReleased)
	waitGone(t, "volume deleted", func() error { _, err := pvs.Get(ctx, "deleted", metav1.GetOptions{}); return err })
	// A new claim does not take the released volume.
	create(t, pvcs.Create, newPVC("three", "1Gi"))
	eventually(t, "claim three pending", func() (bool, error) {
		pvc, err := pvcs.Get(ctx, "three", metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimPending, err
	})
	if pv, err := pvs.Get(ctx, "retained", metav1.GetOptions{}); err != nil || pv.Status.Phase != corev1.VolumeReleased || pv.Spec.ClaimRef.Name != "one" {
		t.Errorf("retained: %v %+v", err, pv)
	}
}

// TestClassesWithoutVolumes: a claim of a WaitForFirstConsumer class waits with kube's
// event; one of an external provisioner's class waits for it (ExternalProvisioning,
// annotated); one of a missing class fails to provision.
func TestClassesWithoutVolumes(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	classes, pvcs := cs.StorageV1().StorageClasses(), cs.CoreV1().PersistentVolumeClaims("default")
	create(t, classes.Create, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)})
	create(t, classes.Create, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "example.com/fast"})
	for name, class := range map[string]string{"delayed": "local", "external": "fast", "missing": "nope"} {
		pvc := newPVC(name, "1Gi")
		pvc.Spec.StorageClassName = ptr.To(class)
		create(t, pvcs.Create, pvc)
	}
	for claim, want := range map[string]struct{ reason, message string }{
		"delayed":  {persistentvolume.WaitForFirstConsumer, "waiting for first consumer to be created before binding"},
		"external": {persistentvolume.ExternalProvisioning, "Waiting for a volume to be created either by the external provisioner 'example.com/fast' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."},
		"missing":  {persistentvolume.ProvisioningFailed, `storageclass.storage.k8s.io "nope" not found`},
	} {
		eventually(t, claim+" event "+want.reason, func() (bool, error) {
			events, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", claim).String()})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.Reason == want.reason && e.Message == want.message {
					return true, nil
				}
			}
			return false, nil
		})
	}
	pvc, err := pvcs.Get(ctx, "external", metav1.GetOptions{})
	if err != nil || pvc.Annotations[persistentvolume.AnnStorageProvisioner] != "example.com/fast" || pvc.Status.Phase != corev1.ClaimPending {
		t.Errorf("external: %v %+v", err, pvc)
	}
}

// TestExternalProvisionerWithDelayedBinding: a claim of a WaitForFirstConsumer class
// whose provisioner is external waits until the scheduler sets selected-node, is then
// annotated for the provisioner; the volume the provisioner creates for it (claimRef
// set) is bound; released with reclaim policy Delete, that volume is left Released for
// its provisioner to delete.
func TestExternalProvisionerWithDelayedBinding(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	pvs, pvcs := cs.CoreV1().PersistentVolumes(), cs.CoreV1().PersistentVolumeClaims("default")
	create(t, cs.StorageV1().StorageClasses().Create, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-path"},
		Provisioner: "rancher.io/local-path", ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)})
	claim := newPVC("data", "1Gi")
	claim.Spec.StorageClassName = ptr.To("local-path")
	claim = create(t, pvcs.Create, claim)
	hasEvent := func(reason, message string) func() (bool, error) {
		return func() (bool, error) {
			events, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "data").String()})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.Reason == reason && e.Message == message {
					return true, nil
				}
			}
			return false, nil
		}
	}
	eventually(t, "WaitForFirstConsumer event", hasEvent(persistentvolume.WaitForFirstConsumer, "waiting for first consumer to be created before binding"))
	if pvc, err := pvcs.Get(ctx, "data", metav1.GetOptions{}); err != nil || pvc.Annotations[persistentvolume.AnnStorageProvisioner] != "" {
		t.Fatalf("a claim waiting for its first consumer is not handed to the provisioner yet: %v %v", err, pvc.Annotations)
	}

	// The scheduler picks a node: the claim goes to the provisioner.
	eventually(t, "selected-node set", func() (bool, error) {
		pvc, err := pvcs.Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, persistentvolume.AnnSelectedNode, "node-a")
		_, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{})
		return err == nil, nil
	})
	eventually(t, "ExternalProvisioning event", hasEvent(persistentvolume.ExternalProvisioning, "Waiting for a volume to be created either by the external provisioner 'rancher.io/local-path' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."))
	pvc, err := pvcs.Get(ctx, "data", metav1.GetOptions{})
	if err != nil || pvc.Annotations[persistentvolume.AnnStorageProvisioner] != "rancher.io/local-path" ||
		pvc.Annotations[persistentvolume.AnnBetaStorageProvisioner] != "rancher.io/local-path" {
		t.Fatalf("claim annotations: %v %v", err, pvc.Annotations)
	}

	// The provisioner's volume, as sig-storage-lib-external-provisioner creates it.
	pv := newPV("pvc-"+string(claim.UID), "1Gi", corev1.PersistentVolumeReclaimDelete)
	pv.Spec.StorageClassName = "local-path"
	pv.Annotations = map[string]string{persistentvolume.AnnDynamicallyProvisioned: "rancher.io/local-path"}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "default", Name: "data", UID: claim.UID}
	create(t, pvs.Create, pv)
	waitBound(t, cs, "default", "data", pv.Name)

	if err := pvcs.Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "claim data", func() error { _, err := pvcs.Get(ctx, "data", metav1.GetOptions{}); return err })
	waitPhase(t, cs, pv.Name, corev1.VolumeReleased)
	// The controller's one volume worker syncs a volume created now after the released
	// one: by then it would have deleted a volume it reclaims itself.
	create(t, pvs.Create, newPV("probe", "1Gi", corev1.PersistentVolumeReclaimDelete))
	waitPhase(t, cs, "probe", corev1.VolumeAvailable)
	got, err := pvs.Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp != nil || got.Status.Phase != corev1.VolumeReleased {
		t.Fatalf("provisioned volume after release: %v %+v", err, got)
	}
	// The provisioner deletes it once the storage is gone; protection lets it go.
	if err := pvs.Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "provisioned volume", func() error { _, err := pvs.Get(ctx, pv.Name, metav1.GetOptions{}); return err })
}
