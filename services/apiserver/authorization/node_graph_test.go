package authorization

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodReferences(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		ServiceAccountName: "builder",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
		Volumes: []corev1.Volume{
			{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-cm"}}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "projected-secret"}}},
			}}}},
		},
		InitContainers: []corev1.Container{{Name: "i", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "init-cm"}}}}}}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e",
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-secret"}}}}}}},
	}}
	tests := []struct {
		resource, name string
		want           bool
	}{
		{"secrets", "registry", true},
		{"configmaps", "vol-cm", true},
		{"secrets", "vol-cm", false},
		{"secrets", "projected-secret", true},
		{"configmaps", "init-cm", true},
		{"secrets", "debug-secret", true},
		{"configmaps", "registry", false},
		{"secrets", "other", false},
	}
	for _, tt := range tests {
		if got := podReferences(pod, tt.resource, tt.name); got != tt.want {
			t.Errorf("podReferences(%s %s) = %v, want %v", tt.resource, tt.name, got, tt.want)
		}
	}
}
