package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func resources(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	list := func(cpu, mem string) v1.ResourceList {
		l := v1.ResourceList{}
		if cpu != "" {
			l[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[v1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	return v1.ResourceRequirements{Requests: list(cpuReq, memReq), Limits: list(cpuLim, memLim)}
}

func podWith(rs ...v1.ResourceRequirements) *v1.Pod {
	pod := &v1.Pod{}
	for _, r := range rs {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "c", Resources: r})
	}
	return pod
}

func TestGetPodQOS(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"no requests or limits is BestEffort", podWith(v1.ResourceRequirements{}), v1.PodQOSBestEffort},
		{"limits equal to requests is Guaranteed", podWith(resources("100m", "64Mi", "100m", "64Mi")), v1.PodQOSGuaranteed},
		{"requests below limits is Burstable", podWith(resources("100m", "64Mi", "200m", "64Mi")), v1.PodQOSBurstable},
		{"requests only is Burstable", podWith(resources("100m", "64Mi", "", "")), v1.PodQOSBurstable},
		{"cpu limit without memory limit is Burstable", podWith(resources("100m", "", "100m", "")), v1.PodQOSBurstable},
		{"one BestEffort container makes the pod Burstable", podWith(resources("1", "1Gi", "1", "1Gi"), v1.ResourceRequirements{}), v1.PodQOSBurstable},
		{"status.qosClass wins", func() *v1.Pod { p := podWith(); p.Status.QOSClass = v1.PodQOSGuaranteed; return p }(), v1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GetPodQOS(tt.pod); got != tt.want {
				t.Errorf("GetPodQOS = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestGetContainerOOMScoreAdjust(t *testing.T) {
	const capacity = 4 << 30
	prio := int32(systemCriticalPriority)
	critical := podWith(v1.ResourceRequirements{})
	critical.Spec.PriorityClassName, critical.Spec.Priority = "system-node-critical", &prio
	tests := []struct {
		name string
		pod  *v1.Pod
		want int
	}{
		{"Guaranteed is -997", podWith(resources("1", "1Gi", "1", "1Gi")), -997},
		{"BestEffort is 1000", podWith(v1.ResourceRequirements{}), 1000},
		{"Burstable scales with the memory request", podWith(resources("", "1Gi", "", "")), 750},
		{"Burstable without memory request is 999", podWith(resources("100m", "", "", "")), 999},
		{"Burstable requesting all memory stays above Guaranteed", podWith(resources("", "8Gi", "", "")), 3},
		{"node-critical pod is treated as Guaranteed", critical, -997},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GetContainerOOMScoreAdjust(tt.pod, &tt.pod.Spec.Containers[0], capacity); got != tt.want {
				t.Errorf("GetContainerOOMScoreAdjust = %d, want %d", got, tt.want)
			}
		})
	}
}
