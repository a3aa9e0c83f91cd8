package runtime

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/services/scheduler/framework"
)

// fixed is a test plugin: a QueueSort, Filter, Score and Bind all in one,
// returning canned answers.
type fixed struct {
	name   string
	scores map[string]int64
	reject map[string]string
}

func (p *fixed) Name() string                               { return p.name }
func (p *fixed) Less(a, b *framework.QueuedPodInfo) bool    { return false }
func (p *fixed) ScoreExtensions() framework.ScoreExtensions { return nil }
func (p *fixed) Bind(context.Context, *framework.CycleState, *v1.Pod, string) *framework.Status {
	return nil
}
func (p *fixed) Filter(_ context.Context, _ *framework.CycleState, _ *v1.Pod, n *framework.NodeInfo) *framework.Status {
	if r, ok := p.reject[n.Node().Name]; ok {
		return framework.NewStatus(framework.Unschedulable, r)
	}
	return nil
}
func (p *fixed) Score(_ context.Context, _ *framework.CycleState, _ *v1.Pod, n *framework.NodeInfo) (int64, *framework.Status) {
	return p.scores[n.Node().Name], nil
}

func registryOf(plugins ...*fixed) Registry {
	r := Registry{}
	for _, p := range plugins {
		r[p.name] = func(context.Context, framework.Handle) (framework.Plugin, error) { return p, nil }
	}
	return r
}

func nodes(names ...string) []*framework.NodeInfo {
	var out []*framework.NodeInfo
	for _, n := range names {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		out = append(out, ni)
	}
	return out
}

func TestNewFrameworkRejectsBadProfiles(t *testing.T) {
	a, b := &fixed{name: "A"}, &fixed{name: "B"}
	tests := []struct {
		name    string
		plugins []PluginConfig
		wantErr string
	}{
		{name: "unknown plugin", plugins: []PluginConfig{{Name: "A"}, {Name: "Nope"}}, wantErr: "not registered"},
		{name: "plugin listed twice", plugins: []PluginConfig{{Name: "A"}, {Name: "A"}}, wantErr: "enabled twice"},
		{name: "two queue sorts", plugins: []PluginConfig{{Name: "A"}, {Name: "B"}}, wantErr: "only one QueueSort"},
		{name: "no plugins at all", wantErr: "no QueueSort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFramework(context.Background(), registryOf(a, b), Profile{SchedulerName: "s", Plugins: tt.plugins}, nil, slog.Default())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunScorePluginsWeighsAndSums(t *testing.T) {
	p := &fixed{name: "P", scores: map[string]int64{"n1": 10, "n2": 50}}
	f, err := NewFramework(context.Background(), registryOf(p), Profile{Plugins: []PluginConfig{{Name: "P", Weight: 3}}}, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	scores, status := f.RunScorePlugins(context.Background(), framework.NewCycleState(), &v1.Pod{}, nodes("n1", "n2"))
	if !status.IsSuccess() {
		t.Fatal(status.AsError())
	}
	if scores[0].TotalScore != 30 || scores[1].TotalScore != 150 {
		t.Fatalf("totals %d, %d; want 30, 150", scores[0].TotalScore, scores[1].TotalScore)
	}
}

func TestRunScorePluginsRejectsOutOfRangeScores(t *testing.T) {
	p := &fixed{name: "P", scores: map[string]int64{"n1": 101}}
	f, _ := NewFramework(context.Background(), registryOf(p), Profile{Plugins: []PluginConfig{{Name: "P"}}}, nil, slog.Default())
	if _, status := f.RunScorePlugins(context.Background(), framework.NewCycleState(), &v1.Pod{}, nodes("n1")); status.Code() != framework.Error {
		t.Fatalf("status %v, want Error", status.Code())
	}
}

func TestRunFilterPluginsNamesTheRejectingPlugin(t *testing.T) {
	p := &fixed{name: "P", reject: map[string]string{"n1": "no room"}}
	f, _ := NewFramework(context.Background(), registryOf(p), Profile{Plugins: []PluginConfig{{Name: "P"}}}, nil, slog.Default())
	status := f.RunFilterPlugins(context.Background(), framework.NewCycleState(), &v1.Pod{}, nodes("n1")[0])
	if status.Code() != framework.Unschedulable || status.Plugin() != "P" || status.Message() != "no room" {
		t.Fatalf("got %v from %q: %q", status.Code(), status.Plugin(), status.Message())
	}
}
