package noderesources

import (
	"context"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/scheduler/framework"
)

// container requests cpu and memory; "" leaves a resource unrequested.
func container(cpu, memory string) v1.Container {
	rl := v1.ResourceList{}
	if cpu != "" {
		rl[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		rl[v1.ResourceMemory] = resource.MustParse(memory)
	}
	return v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: rl}}
}

func pod(containers []v1.Container, initContainers ...v1.Container) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: containers, InitContainers: initContainers}}
	p.Name, p.Namespace = fmt.Sprintf("p-%p", p), "default"
	p.UID = types.UID(p.Name)
	return p
}

// withOverhead sets p's spec.overhead, as the RuntimeClass admission plugin does; ""
// leaves a resource out.
func withOverhead(p *v1.Pod, cpu, memory string) *v1.Pod {
	p.Spec.Overhead = container(cpu, memory).Resources.Requests
	return p
}

func nodeInfo(cpu, memory string, pods int64, existing ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(existing...)
	ni.SetNode(&v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse(cpu),
			v1.ResourceMemory: resource.MustParse(memory),
			v1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
		}},
	})
	return ni
}

func TestFitFilter(t *testing.T) {
	sidecar := container("500m", "")
	always := v1.ContainerRestartPolicyAlways
	sidecar.RestartPolicy = &always
	tests := []struct {
		name        string
		pod         *v1.Pod
		node        *framework.NodeInfo
		wantReasons []string
	}{
		{
			name: "pod within free resources fits",
			pod:  pod([]v1.Container{container("1", "1Gi")}),
			node: nodeInfo("2", "2Gi", 10),
		},
		{
			name:        "pod asking more cpu than free is Insufficient cpu",
			pod:         pod([]v1.Container{container("1500m", "")}),
			node:        nodeInfo("2", "2Gi", 10, pod([]v1.Container{container("1", "")})),
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name:        "pod asking more memory than free is Insufficient memory",
			pod:         pod([]v1.Container{container("", "1536Mi")}),
			node:        nodeInfo("2", "2Gi", 10, pod([]v1.Container{container("", "1Gi")})),
			wantReasons: []string{"Insufficient memory"},
		},
		{
			name:        "container requests are summed",
			pod:         pod([]v1.Container{container("1", ""), container("1", ""), container("500m", "")}),
			node:        nodeInfo("2", "2Gi", 10),
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name: "init containers count at their max, not summed",
			pod:  pod([]v1.Container{container("500m", "")}, container("2", ""), container("2", "")),
			node: nodeInfo("2", "2Gi", 10),
		},
		{
			name:        "an init container larger than the containers sets the request",
			pod:         pod([]v1.Container{container("500m", "")}, container("3", "")),
			node:        nodeInfo("2", "2Gi", 10),
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name:        "sidecar init containers run alongside and are added",
			pod:         pod([]v1.Container{container("1600m", "")}, sidecar),
			node:        nodeInfo("2", "2Gi", 10),
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name:        "a pod's overhead (its RuntimeClass's) is added to its requests",
			pod:         withOverhead(pod([]v1.Container{container("1800m", "")}), "300m", ""),
			node:        nodeInfo("2", "2Gi", 10),
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name:        "the overhead of the pods on the node is in use",
			pod:         pod([]v1.Container{container("", "600Mi")}),
			node:        nodeInfo("2", "2Gi", 10, withOverhead(pod([]v1.Container{container("", "1Gi")}), "", "500Mi")),
			wantReasons: []string{"Insufficient memory"},
		},
		{
			name: "without the overhead the same pod fits",
			pod:  pod([]v1.Container{container("1800m", "")}),
			node: nodeInfo("2", "2Gi", 10),
		},
		{
			name:        "a full node is Too many pods",
			pod:         pod([]v1.Container{container("100m", "")}),
			node:        nodeInfo("2", "2Gi", 1, pod(nil)),
			wantReasons: []string{"Too many pods"},
		},
		{
			name: "a pod requesting nothing fits an overcommitted node",
			pod:  pod([]v1.Container{container("", "")}),
			node: nodeInfo("1", "1Gi", 10, pod([]v1.Container{container("2", "2Gi")})),
		},
		{
			name:        "all shortfalls are reported in kube's order",
			pod:         pod([]v1.Container{container("3", "3Gi")}),
			node:        nodeInfo("2", "2Gi", 1, pod(nil)),
			wantReasons: []string{"Too many pods", "Insufficient cpu", "Insufficient memory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := &Fit{}
			state := framework.NewCycleState()
			if s := f.PreFilter(ctx, state, tt.pod); !s.IsSuccess() {
				t.Fatal(s.AsError())
			}
			status := f.Filter(ctx, state, tt.pod, tt.node)
			if len(tt.wantReasons) == 0 {
				if !status.IsSuccess() {
					t.Fatalf("want fit, got %s", status.Message())
				}
				return
			}
			if status.Code() != framework.Unschedulable || !slices.Equal(status.Reasons(), tt.wantReasons) {
				t.Fatalf("got %v %q, want Unschedulable %q", status.Code(), status.Reasons(), tt.wantReasons)
			}
		})
	}
}

func TestLeastAllocatedPrefersTheEmptierNode(t *testing.T) {
	ctx := context.Background()
	incoming := pod([]v1.Container{container("1", "1Gi")})
	empty := nodeInfo("4", "4Gi", 110)
	busy := nodeInfo("4", "4Gi", 110, pod([]v1.Container{container("2", "2Gi")}))
	l := &Fit{ScoringStrategy: ScoringStrategy{Type: LeastAllocated}}
	state := framework.NewCycleState()
	l.PreScore(ctx, state, incoming, nil)
	emptyScore, _ := l.Score(ctx, state, incoming, empty)
	busyScore, _ := l.Score(ctx, state, incoming, busy)
	// (4-1)/4 = 75 on both resources; (4-3)/4 = 25.
	if emptyScore != 75 || busyScore != 25 {
		t.Fatalf("scores: empty %d, busy %d; want 75, 25", emptyScore, busyScore)
	}
}

func TestUnknownScoringStrategyIsAnError(t *testing.T) {
	ctx := context.Background()
	incoming := pod([]v1.Container{container("1", "1Gi")})
	f := &Fit{ScoringStrategy: ScoringStrategy{Type: "MostAllocated"}}
	state := framework.NewCycleState()
	f.PreScore(ctx, state, incoming, nil)
	if _, s := f.Score(ctx, state, incoming, nodeInfo("4", "4Gi", 110)); s.Code() != framework.Error {
		t.Fatalf("Score under an unknown strategy: %v, want Error", s.Code())
	}
}

func TestNewFitScoresLeastAllocated(t *testing.T) {
	p, err := NewFit(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*Fit).ScoringStrategy.Type; got != LeastAllocated {
		t.Fatalf("default scoring strategy %q, want LeastAllocated", got)
	}
}

func TestLeastAllocatedScore(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		node *framework.NodeInfo
		want int64
	}{
		{name: "mean of cpu and memory", pod: pod([]v1.Container{container("1", "2Gi")}), node: nodeInfo("4", "4Gi", 110), want: (75 + 50) / 2},
		{name: "request-less pod counts at the defaults", pod: pod([]v1.Container{container("", "")}), node: nodeInfo("1", "1000Mi", 110), want: (90 + 80) / 2},
		{name: "overcommitted resource scores 0", pod: pod([]v1.Container{container("8", "1Gi")}), node: nodeInfo("4", "4Gi", 110), want: (0 + 75) / 2},
		{name: "empty node scores near the maximum", pod: pod([]v1.Container{container("1m", "1")}), node: nodeInfo("64", "256Gi", 110), want: 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LeastAllocatedScore(framework.PodRequests(tt.pod, true), tt.node)
			if got != tt.want {
				t.Fatalf("score %d, want %d", got, tt.want)
			}
			if got < framework.MinNodeScore || got > framework.MaxNodeScore {
				t.Fatalf("score %d out of range", got)
			}
		})
	}
}

// TestFitExtendedResources: an extended resource the pod requests must be allocatable
// beyond what the node's pods hold, reported as kube words it; a node without it does
// not fit; a pod requesting none fits anywhere.
func TestFitExtendedResources(t *testing.T) {
	const foo = v1.ResourceName("example.com/foo")
	withFoo := func(n string) *v1.Pod {
		c := container("100m", "")
		c.Resources.Requests[foo] = resource.MustParse(n)
		c.Resources.Limits = v1.ResourceList{foo: resource.MustParse(n)}
		return pod([]v1.Container{c})
	}
	node := func(alloc string, existing ...*v1.Pod) *framework.NodeInfo {
		ni := nodeInfo("4", "4Gi", 110, existing...)
		n := ni.Node().DeepCopy()
		if alloc != "" {
			n.Status.Allocatable[foo] = resource.MustParse(alloc)
		}
		ni.SetNode(n)
		return ni
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		node *framework.NodeInfo
		want []string
	}{
		{"fits", withFoo("2"), node("3", withFoo("1")), nil},
		{"taken", withFoo("3"), node("3", withFoo("1")), []string{"Insufficient example.com/foo"}},
		{"not on the node", withFoo("1"), node(""), []string{"Insufficient example.com/foo"}},
		{"not asked", pod([]v1.Container{container("100m", "")}), node(""), nil},
	} {
		got := InsufficientResources(framework.PodRequests(tc.pod, false), tc.node)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
