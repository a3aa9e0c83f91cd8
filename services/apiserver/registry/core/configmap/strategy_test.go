package configmap

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidate(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "cfg", Namespace: "default"}
	for _, tc := range []struct {
		name    string
		cm      corev1.ConfigMap
		wantErr string // "" means valid
	}{
		{"data and binaryData with distinct keys", corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a.conf": "x"}, BinaryData: map[string][]byte{"b.bin": {1}}}, ""},
		{"a key with a slash", corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a/b": "x"}}, "data[a/b]"},
		{"a key in both data and binaryData", corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "x"}, BinaryData: map[string][]byte{"k": {1}}}, "duplicate of key present in binaryData"},
		{"over 1 MiB in all", corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a": strings.Repeat("x", MaxSize/2+1)}, BinaryData: map[string][]byte{"b": make([]byte, MaxSize/2)}}, "Too long"},
		{"an invalid name", corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name", Namespace: "default"}}, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := Strategy{}.Validate(context.Background(), &tc.cm)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want an error mentioning %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestImmutableConfigMapKeepsItsData(t *testing.T) {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "default", ResourceVersion: "1"}, Data: map[string]string{"k": "v"}, Immutable: ptr.To(true)}
	for _, tc := range []struct {
		name    string
		change  func(*corev1.ConfigMap)
		wantErr string
	}{
		{"labels may change", func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"a": "b"} }, ""},
		{"data may not", func(cm *corev1.ConfigMap) { cm.Data["k"] = "w" }, "data: Forbidden"},
		{"binaryData may not", func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"b": {1}} }, "binaryData: Forbidden"},
		{"immutable may not be unset", func(cm *corev1.ConfigMap) { cm.Immutable = nil }, "immutable: Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := old.DeepCopy()
			tc.change(cm)
			errs := Strategy{}.ValidateUpdate(context.Background(), cm, old)
			if tc.wantErr == "" && len(errs) != 0 || tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("want %q, got %v", tc.wantErr, errs)
			}
		})
	}
}
