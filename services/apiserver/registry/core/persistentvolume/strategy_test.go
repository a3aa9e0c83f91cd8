package persistentvolume

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAccessModesAsString(t *testing.T) {
	got := AccessModesAsString([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOnce})
	if got != "RWO,RWX,RWOP" {
		t.Errorf("got %q, want RWO,RWX,RWOP", got)
	}
}

// TestTableRow: kubectl get pv's columns, as kube's printPersistentVolume prints them.
func TestTableRow(t *testing.T) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", Annotations: map[string]string{BetaStorageClassAnnotation: "old"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany, corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "ignored",
			ClaimRef:                      &corev1.ObjectReference{Namespace: "ns", Name: "data"},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	row := Strategy{}.TableRow(pv)
	if len(row) != len(Strategy{}.TableColumns()) {
		t.Fatalf("%d cells for %d columns", len(row), len(Strategy{}.TableColumns()))
	}
	want := []interface{}{"pv-1", "5Gi", "RWO,ROX", "Retain", "Bound", "ns/data", "old", "<unset>", ""}
	if !reflect.DeepEqual(row[:9], want) || row[10] != "<unset>" {
		t.Errorf("row %v, want %v ... <unset>", row, want)
	}
	now := metav1.Now()
	pv.DeletionTimestamp = &now
	if got := (Strategy{}).TableRow(pv)[4]; got != "Terminating" {
		t.Errorf("status of a volume being deleted: %v", got)
	}
}
