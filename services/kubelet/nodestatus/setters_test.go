package nodestatus

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func readyOf(node *v1.Node) *v1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == v1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func TestReadyCondition(t *testing.T) {
	capacity := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("110"),
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		capacity   v1.ResourceList
		runtimeErr error
		want       v1.ConditionStatus
		wantReason string
	}{
		{"runtime ready and capacity known: Ready", capacity, nil, v1.ConditionTrue, "KubeletReady"},
		{"runtime not ready: NotReady", capacity, errors.New("container runtime not ready"), v1.ConditionFalse, "KubeletNotReady"},
		{"capacity missing: NotReady", v1.ResourceList{}, nil, v1.ConditionFalse, "KubeletNotReady"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &v1.Node{Status: v1.NodeStatus{Capacity: tt.capacity}}
			set := ReadyCondition(func() time.Time { return t0 }, func() error { return tt.runtimeErr })
			if err := set(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			c := readyOf(node)
			if c == nil || c.Status != tt.want || c.Reason != tt.wantReason {
				t.Fatalf("Ready = %+v", c)
			}
			if tt.want == v1.ConditionTrue && c.Message != "kubelet is posting ready status" {
				t.Errorf("message = %q", c.Message)
			}
		})
	}
}

func TestReadyConditionKeepsTransitionTimeWhileUnchanged(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var runtimeErr error
	set := ReadyCondition(func() time.Time { return now }, func() error { return runtimeErr })
	node := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("1"),
	}}}
	_ = set(context.Background(), node)

	now = t0.Add(10 * time.Second)
	_ = set(context.Background(), node)
	c := readyOf(node)
	if !c.LastTransitionTime.Time.Equal(t0) || !c.LastHeartbeatTime.Time.Equal(now) {
		t.Errorf("unchanged: transition %v heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime)
	}

	runtimeErr = errors.New("down")
	now = t0.Add(20 * time.Second)
	_ = set(context.Background(), node)
	if c := readyOf(node); c.Status != v1.ConditionFalse || !c.LastTransitionTime.Time.Equal(now) {
		t.Errorf("changed: %+v", c)
	}
	if n := len(node.Status.Conditions); n != 1 {
		t.Errorf("%d conditions, want 1 (replaced, not appended)", n)
	}
}

func TestPressureConditions(t *testing.T) {
	now := func() time.Time { return time.Unix(1, 0) }
	tests := []struct {
		pressure bool
		status   v1.ConditionStatus
		reasons  map[v1.NodeConditionType]string
	}{
		{false, v1.ConditionFalse, map[v1.NodeConditionType]string{
			v1.NodeMemoryPressure: "KubeletHasSufficientMemory", v1.NodeDiskPressure: "KubeletHasNoDiskPressure", v1.NodePIDPressure: "KubeletHasSufficientPID"}},
		{true, v1.ConditionTrue, map[v1.NodeConditionType]string{
			v1.NodeMemoryPressure: "KubeletHasInsufficientMemory", v1.NodeDiskPressure: "KubeletHasDiskPressure", v1.NodePIDPressure: "KubeletHasInsufficientPID"}},
	}
	for _, tt := range tests {
		node := &v1.Node{}
		pressure := func() bool { return tt.pressure }
		for _, set := range []Setter{MemoryPressureCondition(now, pressure), DiskPressureCondition(now, pressure), PIDPressureCondition(now, pressure)} {
			_ = set(context.Background(), node)
		}
		for _, c := range node.Status.Conditions {
			if c.Status != tt.status || c.Reason != tt.reasons[c.Type] {
				t.Errorf("pressure %v: %s = %s %s", tt.pressure, c.Type, c.Status, c.Reason)
			}
			delete(tt.reasons, c.Type)
		}
		if len(tt.reasons) != 0 {
			t.Errorf("missing conditions %v", tt.reasons)
		}
	}
}

func TestMachineCapacityOverride(t *testing.T) {
	m := Machine{NumCPU: 4, MemoryCapacity: 8 << 30}
	c := m.Capacity(v1.ResourceList{v1.ResourceCPU: resource.MustParse("500")})
	if got := c[v1.ResourceCPU]; got.Value() != 500 {
		t.Errorf("cpu = %s, want the override 500", got.String())
	}
	if got := c[v1.ResourceMemory]; got.Value() != 8<<30 {
		t.Errorf("memory = %s", got.String())
	}
	if got := c[v1.ResourcePods]; got.Value() != DefaultMaxPods {
		t.Errorf("pods = %s", got.String())
	}
}

func TestReadMachineFindsCPUAndMemory(t *testing.T) {
	m := ReadMachine(t.TempDir())
	if m.NumCPU < 1 || m.MemoryCapacity <= 0 || m.KernelVersion == "" {
		t.Errorf("machine = %+v", m)
	}
}

// TestMachineInfoKeepsExtendedResources: the kubelet's own resources are set; an
// extended resource an administrator patched into capacity stays and becomes
// allocatable; one gone from capacity leaves allocatable.
func TestMachineInfoKeepsExtendedResources(t *testing.T) {
	node := &v1.Node{Status: v1.NodeStatus{
		Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "example.com/foo": resource.MustParse("5")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "example.com/foo": resource.MustParse("5"),
			"example.com/gone": resource.MustParse("1")},
	}}
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("1Gi")}
	if err := MachineInfo(Machine{}, capacity)(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	for _, list := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		if cpu, foo := list[v1.ResourceCPU], list["example.com/foo"]; cpu.String() != "4" || foo.String() != "5" || len(list) != 3 {
			t.Errorf("%v, want cpu 4, memory 1Gi and example.com/foo 5", list)
		}
	}
}
