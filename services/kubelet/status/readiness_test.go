package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"skiff.dev/services/kubelet/container"
)

func TestGeneratePodReadyConditionHonoursReadinessGates(t *testing.T) {
	ready := []v1.ContainerStatus{{Name: "c", Ready: true}}
	gate := v1.PodConditionType("example.com/Gate")
	for _, tc := range []struct {
		name        string
		statuses    []v1.ContainerStatus
		conditions  []v1.PodCondition
		gates       []v1.PodReadinessGate
		wantStatus  v1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{name: "no gates: ready containers make the pod Ready", statuses: ready, wantStatus: v1.ConditionTrue},
		{name: "unready container: ContainersNotReady", statuses: []v1.ContainerStatus{{Name: "c"}},
			wantStatus: v1.ConditionFalse, wantReason: ContainersNotReady, wantMessage: "containers with unready status: [c]"},
		{name: "gate condition missing", statuses: ready, gates: []v1.PodReadinessGate{{ConditionType: gate}},
			wantStatus: v1.ConditionFalse, wantReason: ReadinessGatesNotReady,
			wantMessage: `corresponding condition of pod readiness gate "example.com/Gate" does not exist.`},
		{name: "gate condition False", statuses: ready, gates: []v1.PodReadinessGate{{ConditionType: gate}},
			conditions: []v1.PodCondition{{Type: gate, Status: v1.ConditionFalse}},
			wantStatus: v1.ConditionFalse, wantReason: ReadinessGatesNotReady,
			wantMessage: `the status of pod readiness gate "example.com/Gate" is not "True", but False`},
		{name: "gate condition True", statuses: ready, gates: []v1.PodReadinessGate{{ConditionType: gate}},
			conditions: []v1.PodCondition{{Type: gate, Status: v1.ConditionTrue}}, wantStatus: v1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &v1.PodSpec{Containers: []v1.Container{{Name: "c"}}, ReadinessGates: tc.gates}
			got := GeneratePodReadyCondition(spec, tc.conditions, tc.statuses, v1.PodRunning)
			if got.Type != v1.PodReady || got.Status != tc.wantStatus || got.Reason != tc.wantReason || got.Message != tc.wantMessage {
				t.Errorf("got %+v, want %s %s %q", got, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
		})
	}
}

func TestSetContainerReadinessUpdatesConditionsAtOnce(t *testing.T) {
	pod := apiPod()
	m, _ := newTestManager(pod, true)
	s := runningStatus()
	s.ContainerStatuses[0].ContainerID = "test://c1"
	s.ContainerStatuses[0].Ready = false
	m.SetPodStatus(pod, s)

	m.SetContainerReadiness(pod.UID, container.ParseContainerID("test://c1"), true)
	got, _ := m.GetPodStatus(pod.UID)
	if !got.ContainerStatuses[0].Ready || condition(got, v1.PodReady) != v1.ConditionTrue || condition(got, v1.ContainersReady) != v1.ConditionTrue {
		t.Errorf("after ready: %+v", got)
	}
	m.SetContainerReadiness(pod.UID, container.ParseContainerID("test://c1"), false)
	got, _ = m.GetPodStatus(pod.UID)
	if got.ContainerStatuses[0].Ready || condition(got, v1.PodReady) != v1.ConditionFalse {
		t.Errorf("after unready: %+v", got)
	}
	m.SetContainerStartup(pod.UID, container.ParseContainerID("test://c1"), false)
	got, _ = m.GetPodStatus(pod.UID)
	if got.ContainerStatuses[0].Started == nil || *got.ContainerStatuses[0].Started {
		t.Errorf("after startup failure: %+v", got.ContainerStatuses[0])
	}
}

func condition(s v1.PodStatus, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
