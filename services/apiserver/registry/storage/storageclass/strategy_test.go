package storageclass

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidateStorageClass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*storagev1.StorageClass)
		want   string // a substring of the errors; "" means valid
	}{
		{"a valid class", func(*storagev1.StorageClass) {}, ""},
		{"provisioner required", func(sc *storagev1.StorageClass) { sc.Provisioner = "" }, "provisioner: Required value"},
		{"provisioner a qualified name", func(sc *storagev1.StorageClass) { sc.Provisioner = "a/b/c" }, `provisioner: Invalid value: "a/b/c"`},
		{"reclaimPolicy Delete or Retain", func(sc *storagev1.StorageClass) { sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRecycle) },
			`reclaimPolicy: Unsupported value: "Recycle"`},
		{"binding mode supported", func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingMode("Later")) },
			`volumeBindingMode: Unsupported value: "Later"`},
		{"parameter keys not empty", func(sc *storagev1.StorageClass) { sc.Parameters = map[string]string{"": "x"} },
			"parameters: Invalid value: \"\": field can not be empty."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "example.com/fast"}
			Strategy{}.PrepareForCreate(context.Background(), sc)
			tc.change(sc)
			errs := Strategy{}.Validate(context.Background(), sc).ToAggregate()
			switch {
			case tc.want == "" && errs != nil:
				t.Errorf("unexpected errors: %v", errs)
			case tc.want != "" && (errs == nil || !strings.Contains(errs.Error(), tc.want)):
				t.Errorf("errors %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestTableRowMarksTheDefault(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{IsDefaultAnnotation: "true"}},
		Provisioner: "rancher.io/local-path"}
	SetDefaults(sc)
	row := Strategy{}.TableRow(sc)
	if row[0] != "standard (default)" || row[1] != "rancher.io/local-path" || row[2] != "Delete" || row[3] != "Immediate" || row[4] != false {
		t.Errorf("row %v", row)
	}
}
