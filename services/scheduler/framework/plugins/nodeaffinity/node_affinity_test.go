package nodeaffinity

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/scheduler/framework"
)

func node(name string, labels map[string]string) *framework.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	return ni
}

func required(terms ...v1.NodeSelectorTerm) *v1.Affinity {
	return &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func expr(key string, op v1.NodeSelectorOperator, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestFilter(t *testing.T) {
	ssdZoneA := map[string]string{"disk": "ssd", "zone": "a", "cores": "8"}
	tests := []struct {
		name         string
		nodeSelector map[string]string
		affinity     *v1.Affinity
		nodeLabels   map[string]string
		wantFit      bool
	}{
		{name: "pod without constraints fits any node", nodeLabels: ssdZoneA, wantFit: true},
		{name: "nodeSelector matching the labels fits", nodeSelector: map[string]string{"disk": "ssd"}, nodeLabels: ssdZoneA, wantFit: true},
		{name: "nodeSelector with another value does not fit", nodeSelector: map[string]string{"disk": "hdd"}, nodeLabels: ssdZoneA},
		{name: "nodeSelector on a missing label does not fit", nodeSelector: map[string]string{"gpu": "true"}, nodeLabels: ssdZoneA},
		{name: "every nodeSelector entry must match", nodeSelector: map[string]string{"disk": "ssd", "zone": "b"}, nodeLabels: ssdZoneA},
		{
			name:       "In expression matching fits",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpIn, "a", "b")}}),
			nodeLabels: ssdZoneA, wantFit: true,
		},
		{
			name:       "NotIn expression excluding the value does not fit",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpNotIn, "a")}}),
			nodeLabels: ssdZoneA,
		},
		{
			name:       "Exists and DoesNotExist are checked",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("disk", v1.NodeSelectorOpExists), expr("gpu", v1.NodeSelectorOpDoesNotExist)}}),
			nodeLabels: ssdZoneA, wantFit: true,
		},
		{
			name:       "Gt compares integers",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("cores", v1.NodeSelectorOpGt, "4")}}),
			nodeLabels: ssdZoneA, wantFit: true,
		},
		{
			name:       "Lt compares integers",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("cores", v1.NodeSelectorOpLt, "4")}}),
			nodeLabels: ssdZoneA,
		},
		{
			name: "terms are ORed",
			affinity: required(
				v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpIn, "b")}},
				v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("disk", v1.NodeSelectorOpIn, "ssd")}},
			),
			nodeLabels: ssdZoneA, wantFit: true,
		},
		{
			name:       "expressions within a term are ANDed",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpIn, "a"), expr("disk", v1.NodeSelectorOpIn, "hdd")}}),
			nodeLabels: ssdZoneA,
		},
		{
			name:       "an empty term matches no node",
			affinity:   required(v1.NodeSelectorTerm{}),
			nodeLabels: ssdZoneA,
		},
		{
			name:       "an invalid operator matches no node",
			affinity:   required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", "Near", "a")}}),
			nodeLabels: ssdZoneA,
		},
		{
			name:       "matchFields on metadata.name selects the node by name",
			affinity:   required(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{expr("metadata.name", v1.NodeSelectorOpIn, "n1")}}),
			nodeLabels: ssdZoneA, wantFit: true,
		},
		{
			name:       "matchFields on another name does not fit",
			affinity:   required(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{expr("metadata.name", v1.NodeSelectorOpIn, "n2")}}),
			nodeLabels: ssdZoneA,
		},
		{
			name:         "nodeSelector and affinity must both match",
			nodeSelector: map[string]string{"disk": "hdd"},
			affinity:     required(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpIn, "a")}}),
			nodeLabels:   ssdZoneA,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			pod := &v1.Pod{Spec: v1.PodSpec{NodeSelector: tt.nodeSelector, Affinity: tt.affinity}}
			pl := &NodeAffinity{}
			state := framework.NewCycleState()
			if s := pl.PreFilter(ctx, state, pod); !s.IsSuccess() {
				t.Fatal(s.AsError())
			}
			status := pl.Filter(ctx, state, pod, node("n1", tt.nodeLabels))
			if tt.wantFit {
				if !status.IsSuccess() {
					t.Fatalf("want fit, got %s", status.Message())
				}
				return
			}
			if status.Code() != framework.UnschedulableAndUnresolvable || status.Message() != "node(s) didn't match Pod's node affinity/selector" {
				t.Fatalf("got %v %q", status.Code(), status.Message())
			}
		})
	}
}

func TestScorePrefersNodesMatchingHeavierPreferredTerms(t *testing.T) {
	ctx := context.Background()
	pod := &v1.Pod{Spec: v1.PodSpec{Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{
			{Weight: 3, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("zone", v1.NodeSelectorOpIn, "a")}}},
			{Weight: 1, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{expr("disk", v1.NodeSelectorOpIn, "ssd")}}},
		},
	}}}}
	nodes := []*framework.NodeInfo{
		node("both", map[string]string{"zone": "a", "disk": "ssd"}),
		node("zone", map[string]string{"zone": "a"}),
		node("disk", map[string]string{"disk": "ssd"}),
		node("none", nil),
	}
	pl := &NodeAffinity{}
	state := framework.NewCycleState()
	pl.PreScore(ctx, state, pod, nodes)
	scores := make(framework.NodeScoreList, len(nodes))
	for i, n := range nodes {
		s, st := pl.Score(ctx, state, pod, n)
		if !st.IsSuccess() {
			t.Fatal(st.AsError())
		}
		scores[i] = framework.NodeScore{Name: n.Node().Name, Score: s}
	}
	pl.NormalizeScore(ctx, state, pod, scores)
	want := []int64{100, 75, 25, 0}
	for i := range want {
		if scores[i].Score != want[i] {
			t.Errorf("%s: score %d, want %d", scores[i].Name, scores[i].Score, want[i])
		}
	}
}
