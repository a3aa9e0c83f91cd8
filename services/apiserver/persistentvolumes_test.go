package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// hostPathPV is a 1Gi ReadWriteOnce hostPath PersistentVolume of class class.
func hostPathPV(name, class, path string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:       class,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
		},
	}
}

// claim is a ReadWriteOnce claim of size with class (nil: none named).
func claim(name, size string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: class,
		},
	}
}

// wantPVInvalid fails unless err is a 422 whose message holds want.
func wantPVInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want a 422 with %q", err, want)
	}
}

// TestPersistentVolumesServed covers core/v1 persistentvolumes and
// persistentvolumeclaims and storage.k8s.io/v1 storageclasses over HTTP: discovery with
// short names, kube's defaults and create-time status, kube's 422s, the claim's
// immutable spec, the status subresources and the DefaultStorageClass admission plugin.
func TestPersistentVolumesServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()

	t.Run("discovery", func(t *testing.T) {
		core, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]string{}
		for _, r := range core.APIResources {
			found[r.Name] = strings.Join(r.ShortNames, ",")
			if (r.Name == "persistentvolumes") == r.Namespaced && (r.Name == "persistentvolumes" || r.Name == "persistentvolumeclaims") {
				t.Errorf("%s namespaced %v", r.Name, r.Namespaced)
			}
		}
		if found["persistentvolumes"] != "pv" || found["persistentvolumeclaims"] != "pvc" {
			t.Errorf("short names %v", found)
		}
		for _, sub := range []string{"persistentvolumes/status", "persistentvolumeclaims/status"} {
			if _, ok := found[sub]; !ok {
				t.Errorf("%s not served", sub)
			}
		}
		storage, err := cs.Discovery().ServerResourcesForGroupVersion("storage.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		var sc *metav1.APIResource
		for i := range storage.APIResources {
			if storage.APIResources[i].Name == "storageclasses" {
				sc = &storage.APIResources[i]
			}
		}
		if sc == nil || sc.Namespaced || strings.Join(sc.ShortNames, ",") != "sc" {
			t.Errorf("storage.k8s.io/v1 resources %+v", storage.APIResources)
		}
	})

	t.Run("PV defaults, status and 422s", func(t *testing.T) {
		pv := hostPathPV("pv-defaults", "", "/tmp/pv-defaults")
		pv.Status.Phase = corev1.VolumeBound
		created, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Status.Phase != corev1.VolumePending || created.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain ||
			ptr.Deref(created.Spec.VolumeMode, "") != corev1.PersistentVolumeFilesystem || created.Status.LastPhaseTransitionTime == nil {
			t.Errorf("created %+v %+v", created.Spec, created.Status)
		}
		created.Status.Phase = corev1.VolumeAvailable
		updated, err := cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil || updated.Status.Phase != corev1.VolumeAvailable {
			t.Errorf("status update: %v %+v", err, updated)
		}
		updated.Spec.PersistentVolumeSource.HostPath.Path = "/elsewhere"
		_, err = cs.CoreV1().PersistentVolumes().Update(ctx, updated, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "spec.persistentvolumesource: Forbidden")

		for _, tc := range []struct {
			change func(*corev1.PersistentVolume)
			want   string
		}{
			{func(pv *corev1.PersistentVolume) { pv.Spec.AccessModes = nil }, "spec.accessModes: Required value"},
			{func(pv *corev1.PersistentVolume) { pv.Spec.Capacity = nil }, "spec.capacity: Required value"},
			{func(pv *corev1.PersistentVolume) { pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("0") },
				`spec.capacity[storage]: Invalid value: "0": must be greater than zero`},
			{func(pv *corev1.PersistentVolume) { pv.Spec.HostPath = nil }, "spec: Required value: must specify a volume type"},
			{func(pv *corev1.PersistentVolume) { pv.Spec.Local = &corev1.LocalVolumeSource{Path: "/tmp/x"} },
				"spec.local: Forbidden: may not specify more than 1 volume type"},
			{func(pv *corev1.PersistentVolume) {
				pv.Spec.HostPath, pv.Spec.Local = nil, &corev1.LocalVolumeSource{Path: "/tmp/x"}
			}, "spec.nodeAffinity: Required value: Local volume requires node affinity"},
			{func(pv *corev1.PersistentVolume) { pv.Spec.HostPath.Path = "/tmp/../etc" }, "spec.hostPath.path: Invalid value: \"/tmp/../etc\": must not contain '..'"},
			{func(pv *corev1.PersistentVolume) {
				pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"ReadSometimes"}
			},
				`spec.accessModes: Unsupported value: "ReadSometimes"`},
			{func(pv *corev1.PersistentVolume) { pv.Spec.PersistentVolumeReclaimPolicy = "Keep" },
				`spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep"`},
		} {
			pv := hostPathPV("pv-invalid", "", "/tmp/pv-invalid")
			tc.change(pv)
			_, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}
	})

	t.Run("PVC defaults, immutability and 422s", func(t *testing.T) {
		pvcs := cs.CoreV1().PersistentVolumeClaims("default")
		created, err := pvcs.Create(ctx, claim("pvc-defaults", "1Gi", ptr.To("")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Status.Phase != corev1.ClaimPending || ptr.Deref(created.Spec.VolumeMode, "") != corev1.PersistentVolumeFilesystem {
			t.Errorf("created %+v %+v", created.Spec, created.Status)
		}
		created.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
		_, err = pvcs.Update(ctx, created, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims")
		// volumeName may be set once, as the PV controller does.
		patched, err := pvcs.Patch(ctx, "pvc-defaults", types.MergePatchType, []byte(`{"spec":{"volumeName":"pv-x"}}`), metav1.PatchOptions{})
		if err != nil || patched.Spec.VolumeName != "pv-x" {
			t.Errorf("setting volumeName: %v", err)
		}
		_, err = pvcs.Patch(ctx, "pvc-defaults", types.MergePatchType, []byte(`{"spec":{"volumeName":"pv-y"}}`), metav1.PatchOptions{})
		wantPVInvalid(t, err, "spec: Forbidden")
		// Nothing expands a volume: growing a claim is kube's PersistentVolumeClaimResize 403.
		_, err = pvcs.Patch(ctx, "pvc-defaults", types.MergePatchType, []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize") {
			t.Errorf("growing the claim: %v, want 403", err)
		}
		// No VolumeAttributesClasses are served: the field is dropped, as kube with its
		// feature gate off.
		vac := claim("pvc-vac", "1Gi", ptr.To(""))
		vac.Spec.VolumeAttributesClassName = ptr.To("gold")
		if got, err := pvcs.Create(ctx, vac, metav1.CreateOptions{}); err != nil || got.Spec.VolumeAttributesClassName != nil {
			t.Errorf("volumeAttributesClassName: %v, %v, want it dropped", err, got.Spec.VolumeAttributesClassName)
		}

		for _, tc := range []struct {
			change func(*corev1.PersistentVolumeClaim)
			want   string
		}{
			{func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }, "spec.accessModes: Required value: at least 1 access mode is required"},
			{func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }, "spec.resources[storage]: Required value"},
			{func(c *corev1.PersistentVolumeClaim) {
				c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("0")
			},
				`spec.resources[storage]: Invalid value: "0": must be greater than zero`},
			{func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To("Not_A_Class") }, `spec.storageClassName: Invalid value: "Not_A_Class"`},
			{func(c *corev1.PersistentVolumeClaim) {
				c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadWriteOnce}
			}, "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"},
		} {
			c := claim("pvc-invalid", "1Gi", nil)
			tc.change(c)
			_, err := pvcs.Create(ctx, c, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}
	})

	t.Run("storage classes and the default class", func(t *testing.T) {
		classes := cs.StorageV1().StorageClasses()
		_, err := classes.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "no-provisioner"}}, metav1.CreateOptions{})
		wantPVInvalid(t, err, "provisioner: Required value")
		_, err = classes.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Provisioner: "not a name"}, metav1.CreateOptions{})
		wantPVInvalid(t, err, `provisioner: Invalid value: "not a name"`)
		sc, err := classes.Create(ctx, &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: "kubernetes.io/no-provisioner",
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(sc.ReclaimPolicy, "") != corev1.PersistentVolumeReclaimDelete || ptr.Deref(sc.VolumeBindingMode, "") != storagev1.VolumeBindingImmediate {
			t.Errorf("class defaults %+v %+v", sc.ReclaimPolicy, sc.VolumeBindingMode)
		}
		sc.Provisioner = "example.com/other"
		_, err = classes.Update(ctx, sc, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "provisioner: Forbidden: updates to provisioner are forbidden.")

		// DefaultStorageClass admission reads classes from the watch cache (as kube's
		// from its informer): wait until the cache holds the class before relying on it.
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := classes.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, nil
			}
			for _, c := range list.Items {
				if c.Name == sc.Name {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("class %s never reached the watch cache: %v", sc.Name, err)
		}
		pvcs := cs.CoreV1().PersistentVolumeClaims("default")
		defaulted, err := pvcs.Create(ctx, claim("pvc-default-class", "1Gi", nil), metav1.CreateOptions{})
		if err != nil || ptr.Deref(defaulted.Spec.StorageClassName, "") != "standard" {
			t.Errorf("claim without a class: %v, class %v", err, defaulted.Spec.StorageClassName)
		}
		explicit, err := pvcs.Create(ctx, claim("pvc-no-class", "1Gi", ptr.To("")), metav1.CreateOptions{})
		if err != nil || ptr.Deref(explicit.Spec.StorageClassName, "x") != "" {
			t.Errorf("claim with class \"\": %v, class %v", err, explicit.Spec.StorageClassName)
		}
	})
}
