package cm

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestGetPodCgroupParent(t *testing.T) {
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}
	tests := []struct {
		name string
		res  v1.ResourceRequirements
		want string
	}{
		{"Guaranteed pods sit directly under kubepods", v1.ResourceRequirements{Limits: limits, Requests: limits}, "/kubepods/pod1234-ab"},
		{"Burstable pods under kubepods/burstable", v1.ResourceRequirements{Requests: limits}, "/kubepods/burstable/pod1234-ab"},
		{"BestEffort pods under kubepods/besteffort", v1.ResourceRequirements{}, "/kubepods/besteffort/pod1234-ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: tt.res}}}}
			pod.UID = "1234-ab"
			if got := GetPodCgroupParent(pod); got != tt.want {
				t.Errorf("GetPodCgroupParent = %q, want %q", got, tt.want)
			}
		})
	}
}
