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

func TestCgroupDriverNames(t *testing.T) {
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}
	pod := func(res v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: res}}}}
		p.UID = "1234-abcd-5678"
		return p
	}
	tests := []struct {
		name              string
		pod               *v1.Pod
		cgroupfs, systemd string
	}{
		{"Guaranteed", pod(v1.ResourceRequirements{Limits: limits, Requests: limits}),
			"/kubepods/pod1234-abcd-5678", "/kubepods.slice/kubepods-pod1234_abcd_5678.slice"},
		{"Burstable", pod(v1.ResourceRequirements{Requests: limits}),
			"/kubepods/burstable/pod1234-abcd-5678", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678.slice"},
		{"BestEffort", pod(v1.ResourceRequirements{}),
			"/kubepods/besteffort/pod1234-abcd-5678", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := PodCgroupName(tt.pod)
			if got := CgroupDriverCgroupfs.Name(name); got != tt.cgroupfs {
				t.Errorf("cgroupfs: %q, want %q", got, tt.cgroupfs)
			}
			if got := CgroupDriverSystemd.Name(name); got != tt.systemd {
				t.Errorf("systemd: %q, want %q", got, tt.systemd)
			}
		})
	}
	if got := (CgroupName{}).ToSystemd(); got != "/" {
		t.Errorf("the root in systemd naming: %q", got)
	}
	for in, want := range map[string]CgroupDriver{"": CgroupDriverCgroupfs, "cgroupfs": CgroupDriverCgroupfs, "systemd": CgroupDriverSystemd} {
		if got, err := ParseCgroupDriver(in); err != nil || got != want {
			t.Errorf("ParseCgroupDriver(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseCgroupDriver("Systemd"); err == nil {
		t.Error("ParseCgroupDriver accepted Systemd")
	}
}
