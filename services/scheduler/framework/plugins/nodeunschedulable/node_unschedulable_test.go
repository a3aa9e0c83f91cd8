package nodeunschedulable

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

func TestFilter(t *testing.T) {
	tests := []struct {
		name          string
		unschedulable bool
		tols          []v1.Toleration
		wantFit       bool
	}{
		{name: "schedulable node fits", wantFit: true},
		{name: "cordoned node rejects a pod without tolerations", unschedulable: true},
		{
			name:          "cordoned node takes a pod tolerating the unschedulable taint",
			unschedulable: true,
			tols:          []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}},
			wantFit:       true,
		},
		{
			name:          "cordoned node takes a pod tolerating everything",
			unschedulable: true,
			tols:          []v1.Toleration{{Operator: v1.TolerationOpExists}},
			wantFit:       true,
		},
		{
			name:          "toleration of another taint does not help",
			unschedulable: true,
			tols:          []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}},
		},
		{
			name:          "toleration for NoExecute only does not help",
			unschedulable: true,
			tols:          []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ni := framework.NewNodeInfo()
			ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Unschedulable: tt.unschedulable}})
			pod := &v1.Pod{Spec: v1.PodSpec{Tolerations: tt.tols}}
			p, _ := New(context.Background(), handle{})
			status := p.(framework.FilterPlugin).Filter(context.Background(), framework.NewCycleState(), pod, ni)
			if tt.wantFit {
				if !status.IsSuccess() {
					t.Fatalf("want fit, got %s", status.Message())
				}
				return
			}
			if status.Code() != framework.UnschedulableAndUnresolvable || status.Message() != "node(s) were unschedulable" {
				t.Fatalf("got %v %q", status.Code(), status.Message())
			}
		})
	}
}
