package tainttoleration

import (
	"context"
	"log/slog"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/scheduler/framework"
)

// handle lends the plugin only a client and a logger; the rest of framework.Handle is
// nil (the plugin uses none of it).
type handle struct{ framework.Handle }

func (handle) ClientSet() kubernetes.Interface { return nil }
func (handle) Logger() *slog.Logger            { return slog.New(slog.DiscardHandler) }

func nodeWithTaints(taints ...v1.Taint) *framework.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Taints: taints}})
	return ni
}

func podWithTolerations(tols ...v1.Toleration) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: v1.PodSpec{Tolerations: tols}}
}

func TestFilter(t *testing.T) {
	gpuNoSchedule := v1.Taint{Key: "dedicated", Value: "gpu", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		name       string
		taints     []v1.Taint
		tols       []v1.Toleration
		wantReason string // "" means the node fits
	}{
		{name: "untainted node fits any pod"},
		{
			name:       "untolerated NoSchedule taint rejects and names the taint",
			taints:     []v1.Taint{gpuNoSchedule},
			wantReason: "node(s) had untolerated taint {dedicated: gpu}",
		},
		{
			name:   "Equal toleration with same key, value and effect tolerates",
			taints: []v1.Taint{gpuNoSchedule},
			tols:   []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "gpu", Effect: v1.TaintEffectNoSchedule}},
		},
		{
			name:   "empty operator means Equal",
			taints: []v1.Taint{gpuNoSchedule},
			tols:   []v1.Toleration{{Key: "dedicated", Value: "gpu"}},
		},
		{
			name:       "Equal toleration with another value does not tolerate",
			taints:     []v1.Taint{gpuNoSchedule},
			tols:       []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "cpu", Effect: v1.TaintEffectNoSchedule}},
			wantReason: "node(s) had untolerated taint {dedicated: gpu}",
		},
		{
			name:   "Exists toleration ignores the value",
			taints: []v1.Taint{gpuNoSchedule},
			tols:   []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}},
		},
		{
			name:   "empty key with Exists tolerates every taint",
			taints: []v1.Taint{gpuNoSchedule, {Key: "other", Effect: v1.TaintEffectNoExecute}},
			tols:   []v1.Toleration{{Operator: v1.TolerationOpExists}},
		},
		{
			name:       "toleration for another effect does not tolerate",
			taints:     []v1.Taint{gpuNoSchedule},
			tols:       []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}},
			wantReason: "node(s) had untolerated taint {dedicated: gpu}",
		},
		{
			name:       "untolerated NoExecute taint rejects",
			taints:     []v1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoExecute}},
			wantReason: "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
		},
		{
			name:   "tolerated NoExecute taint fits",
			taints: []v1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoExecute}},
			tols:   []v1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}},
		},
		{
			name:   "PreferNoSchedule taint never rejects",
			taints: []v1.Taint{{Key: "spot", Value: "true", Effect: v1.TaintEffectPreferNoSchedule}},
		},
		{
			name:       "first untolerated taint is reported",
			taints:     []v1.Taint{{Key: "a", Value: "1", Effect: v1.TaintEffectNoSchedule}, {Key: "b", Value: "2", Effect: v1.TaintEffectNoSchedule}},
			tols:       []v1.Toleration{{Key: "a", Operator: v1.TolerationOpExists}},
			wantReason: "node(s) had untolerated taint {b: 2}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := New(context.Background(), handle{})
			status := p.(framework.FilterPlugin).Filter(context.Background(), framework.NewCycleState(), podWithTolerations(tt.tols...), nodeWithTaints(tt.taints...))
			if tt.wantReason == "" {
				if !status.IsSuccess() {
					t.Fatalf("want fit, got %v: %s", status.Code(), status.Message())
				}
				return
			}
			if status.Code() != framework.UnschedulableAndUnresolvable || status.Message() != tt.wantReason {
				t.Fatalf("got %v %q, want UnschedulableAndUnresolvable %q", status.Code(), status.Message(), tt.wantReason)
			}
		})
	}
}

func TestScorePrefersNodesWithFewerUntoleratedPreferNoScheduleTaints(t *testing.T) {
	ctx := context.Background()
	p, _ := New(ctx, handle{})
	pl := p.(*TaintToleration)
	prefer := func(key string) v1.Taint { return v1.Taint{Key: key, Effect: v1.TaintEffectPreferNoSchedule} }
	nodes := []*framework.NodeInfo{nodeWithTaints(), nodeWithTaints(prefer("a")), nodeWithTaints(prefer("a"), prefer("b")), nodeWithTaints(prefer("c"))}
	pod := podWithTolerations(v1.Toleration{Key: "c", Operator: v1.TolerationOpExists})
	state := framework.NewCycleState()
	if s := pl.PreScore(ctx, state, pod, nodes); !s.IsSuccess() {
		t.Fatal(s.AsError())
	}
	scores := make(framework.NodeScoreList, len(nodes))
	for i, n := range nodes {
		s, st := pl.Score(ctx, state, pod, n)
		if !st.IsSuccess() {
			t.Fatal(st.AsError())
		}
		scores[i] = framework.NodeScore{Name: n.Node().Name, Score: s}
	}
	pl.NormalizeScore(ctx, state, pod, scores)
	want := []int64{100, 50, 0, 100}
	for i := range want {
		if scores[i].Score != want[i] {
			t.Errorf("node %d: score %d, want %d", i, scores[i].Score, want[i])
		}
	}
}
