// Package runtime instantiates the plugins of a scheduling profile and runs
// them at each extension point. Mirrors kube-scheduler's
// pkg/scheduler/framework/runtime (frameworkImpl and Registry).
package runtime

import (
	"context"
	"fmt"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/record"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/scheduler/framework"
)

// PluginFactory builds a plugin, giving it the framework Handle.
type PluginFactory func(ctx context.Context, h framework.Handle) (framework.Plugin, error)

// Registry maps plugin names to factories: the plugins a profile may enable.
// Mirrors kube-scheduler's runtime.Registry.
type Registry map[string]PluginFactory

// PluginConfig enables one plugin in a profile. Weight multiplies its Score
// (0 means 1) and is ignored for plugins that do not score.
type PluginConfig struct {
	Name   string
	Weight int64
}

// Profile is one scheduler personality: the schedulerName it serves and its
// plugins in order. A plugin is enabled at every extension point it
// implements, in the order listed. Mirrors kube-scheduler's
// KubeSchedulerProfile, flattened (no per-extension-point lists).
type Profile struct {
	SchedulerName string
	Plugins       []PluginConfig
}

type frameworkImpl struct {
	profileName  string
	client       kubernetes.Interface
	logger       *slog.Logger
	recorder     record.EventRecorder
	snapshot     framework.NodeInfoLister
	nominator    framework.PodNominator
	pdbLister    policylisters.PodDisruptionBudgetLister
	informers    informers.SharedInformerFactory
	queueSort    framework.QueueSortPlugin
	preFilter    []framework.PreFilterPlugin
	filter       []framework.FilterPlugin
	postFilter   []framework.PostFilterPlugin
	preScore     []framework.PreScorePlugin
	score        []framework.ScorePlugin
	scoreWeights map[string]int64
	reserve      []framework.ReservePlugin
	preBind      []framework.PreBindPlugin
	bind         []framework.BindPlugin
}

var _ framework.Framework = (*frameworkImpl)(nil)

// Option sets what the framework lends its plugins beyond the client and logger.
type Option func(*frameworkImpl)

// WithSnapshotSharedLister gives the plugins the scheduling cycle's snapshot.
func WithSnapshotSharedLister(l framework.NodeInfoLister) Option {
	return func(f *frameworkImpl) { f.snapshot = l }
}

// WithPodNominator gives the framework the nominated pods (the scheduling queue's).
func WithPodNominator(n framework.PodNominator) Option {
	return func(f *frameworkImpl) { f.nominator = n }
}

// WithPDBLister gives the plugins the PodDisruptionBudgets.
func WithPDBLister(l policylisters.PodDisruptionBudgetLister) Option {
	return func(f *frameworkImpl) { f.pdbLister = l }
}

// WithInformerFactory gives the plugins the scheduler's informer factory.
func WithInformerFactory(f informers.SharedInformerFactory) Option {
	return func(fw *frameworkImpl) { fw.informers = f }
}

// WithEventRecorder gives the plugins the scheduler's event recorder.
func WithEventRecorder(r record.EventRecorder) Option {
	return func(f *frameworkImpl) { f.recorder = r }
}

// NewFramework builds every plugin the profile enables from the registry and
// sorts them into extension points. It fails on an unknown plugin name, a
// failing factory, or a profile without exactly one QueueSort plugin or
// without a Bind plugin.
func NewFramework(ctx context.Context, r Registry, profile Profile, client kubernetes.Interface, logger *slog.Logger, opts ...Option) (framework.Framework, error) {
	f := &frameworkImpl{
		profileName:  profile.SchedulerName,
		client:       client,
		logger:       logger,
		recorder:     eventrecorder.Nop{},
		scoreWeights: map[string]int64{},
	}
	for _, o := range opts {
		o(f)
	}
	seen := map[string]bool{}
	for _, pc := range profile.Plugins {
		if seen[pc.Name] {
			return nil, fmt.Errorf("profile %q: plugin %q enabled twice", profile.SchedulerName, pc.Name)
		}
		seen[pc.Name] = true
		factory, ok := r[pc.Name]
		if !ok {
			return nil, fmt.Errorf("profile %q: plugin %q is not registered", profile.SchedulerName, pc.Name)
		}
		p, err := factory(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("profile %q: building plugin %q: %w", profile.SchedulerName, pc.Name, err)
		}
		if p, ok := p.(framework.QueueSortPlugin); ok {
			if f.queueSort != nil {
				return nil, fmt.Errorf("profile %q: only one QueueSort plugin may be enabled, have %q and %q", profile.SchedulerName, f.queueSort.Name(), p.Name())
			}
			f.queueSort = p
		}
		if p, ok := p.(framework.PreFilterPlugin); ok {
			f.preFilter = append(f.preFilter, p)
		}
		if p, ok := p.(framework.FilterPlugin); ok {
			f.filter = append(f.filter, p)
		}
		if p, ok := p.(framework.PostFilterPlugin); ok {
			f.postFilter = append(f.postFilter, p)
		}
		if p, ok := p.(framework.PreScorePlugin); ok {
			f.preScore = append(f.preScore, p)
		}
		if p, ok := p.(framework.ScorePlugin); ok {
			f.score = append(f.score, p)
			w := pc.Weight
			if w == 0 {
				w = 1
			}
			f.scoreWeights[p.Name()] = w
		}
		if p, ok := p.(framework.ReservePlugin); ok {
			f.reserve = append(f.reserve, p)
		}
		if p, ok := p.(framework.PreBindPlugin); ok {
			f.preBind = append(f.preBind, p)
		}
		if p, ok := p.(framework.BindPlugin); ok {
			f.bind = append(f.bind, p)
		}
	}
	if f.queueSort == nil {
		return nil, fmt.Errorf("profile %q: no QueueSort plugin enabled", profile.SchedulerName)
	}
	if len(f.bind) == 0 {
		return nil, fmt.Errorf("profile %q: no Bind plugin enabled", profile.SchedulerName)
	}
	return f, nil
}

func (f *frameworkImpl) ClientSet() kubernetes.Interface                { return f.client }
func (f *frameworkImpl) Logger() *slog.Logger                           { return f.logger }
func (f *frameworkImpl) EventRecorder() record.EventRecorder            { return f.recorder }
func (f *frameworkImpl) SnapshotSharedLister() framework.NodeInfoLister { return f.snapshot }
func (f *frameworkImpl) PodNominator() framework.PodNominator           { return f.nominator }
func (f *frameworkImpl) PDBLister() policylisters.PodDisruptionBudgetLister {
	return f.pdbLister
}
func (f *frameworkImpl) SharedInformerFactory() informers.SharedInformerFactory {
	return f.informers
}
func (f *frameworkImpl) HasPostFilterPlugins() bool { return len(f.postFilter) > 0 }
func (f *frameworkImpl) ProfileName() string        { return f.profileName }
func (f *frameworkImpl) QueueSortFunc() framework.LessFunc {
	return f.queueSort.Less
}
func (f *frameworkImpl) HasScorePlugins() bool { return len(f.score) > 0 }

func (f *frameworkImpl) RunPreFilterPlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod) *framework.Status {
	for _, p := range f.preFilter {
		if s := p.PreFilter(ctx, state, pod); !s.IsSuccess() {
			if !s.IsRejected() {
				return framework.AsStatus(fmt.Errorf("running PreFilter plugin %q: %w", p.Name(), s.AsError())).WithPlugin(p.Name())
			}
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

func (f *frameworkImpl) RunFilterPlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	for _, p := range f.filter {
		if s := p.Filter(ctx, state, pod, nodeInfo); !s.IsSuccess() {
			if !s.IsRejected() {
				return framework.AsStatus(fmt.Errorf("running Filter plugin %q: %w", p.Name(), s.AsError())).WithPlugin(p.Name())
			}
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

// RunFilterPluginsWithNominatedPods runs the filters with the pods nominated
// to the node of at least pod's priority (other than pod) counted as already
// there, so that a pod of no higher priority does not take the room preemption
// is making for them; with some, it runs them once more without, as kube does
// for filters that a pod's presence can satisfy (both must pass). Mirrors
// kube-scheduler's RunFilterPluginsWithNominatedPods.
func (f *frameworkImpl) RunFilterPluginsWithNominatedPods(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeInfo *framework.NodeInfo) *framework.Status {
	if f.nominator == nil || nodeInfo.Node() == nil {
		return f.RunFilterPlugins(ctx, state, pod, nodeInfo)
	}
	var withNominated *framework.NodeInfo
	priority := corev1helpers.PodPriority(pod)
	for _, pi := range f.nominator.NominatedPodsForNode(nodeInfo.Node().Name) {
		if pi.Pod.UID == pod.UID || corev1helpers.PodPriority(pi.Pod) < priority {
			continue
		}
		if withNominated == nil {
			withNominated = nodeInfo.Clone()
		}
		withNominated.AddPodInfo(pi)
	}
	if withNominated == nil {
		return f.RunFilterPlugins(ctx, state, pod, nodeInfo)
	}
	if s := f.RunFilterPlugins(ctx, state, pod, withNominated); !s.IsSuccess() {
		return s
	}
	return f.RunFilterPlugins(ctx, state, pod, nodeInfo)
}

// RunPostFilterPlugins runs each PostFilter plugin until one succeeds (or
// fails with an error); when none helps, the result is Unschedulable with
// their messages.
func (f *frameworkImpl) RunPostFilterPlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, m framework.NodeToStatusMap) (*framework.PostFilterResult, *framework.Status) {
	var reasons []string
	for _, p := range f.postFilter {
		result, s := p.PostFilter(ctx, state, pod, m)
		if s.IsSuccess() {
			return result, s
		}
		if !s.IsRejected() {
			return nil, framework.AsStatus(fmt.Errorf("running PostFilter plugin %q: %w", p.Name(), s.AsError())).WithPlugin(p.Name())
		}
		reasons = append(reasons, s.Reasons()...)
	}
	return nil, framework.NewStatus(framework.Unschedulable, reasons...)
}

func (f *frameworkImpl) RunPreScorePlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodes []*framework.NodeInfo) *framework.Status {
	for _, p := range f.preScore {
		if s := p.PreScore(ctx, state, pod, nodes); !s.IsSuccess() {
			return framework.AsStatus(fmt.Errorf("running PreScore plugin %q: %w", p.Name(), s.AsError())).WithPlugin(p.Name())
		}
	}
	return nil
}

func (f *frameworkImpl) RunScorePlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodes []*framework.NodeInfo) ([]framework.NodePluginScores, *framework.Status) {
	// Two allocations per cycle, not one per node and plugin: every node's plugin scores
	// are a slice of one array, and each plugin's score list reuses the one before's.
	result := make([]framework.NodePluginScores, len(nodes))
	pluginScores := make([]framework.PluginScore, len(nodes)*len(f.score))
	for i, n := range nodes {
		at := i * len(f.score)
		result[i] = framework.NodePluginScores{Name: n.Node().Name, Scores: pluginScores[at : at : at+len(f.score)]}
	}
	scores := make(framework.NodeScoreList, len(nodes))
	for _, p := range f.score {
		for i, n := range nodes {
			s, status := p.Score(ctx, state, pod, n)
			if !status.IsSuccess() {
				return nil, framework.AsStatus(fmt.Errorf("running Score plugin %q on node %q: %w", p.Name(), n.Node().Name, status.AsError())).WithPlugin(p.Name())
			}
			scores[i] = framework.NodeScore{Name: n.Node().Name, Score: s}
		}
		if ext := p.ScoreExtensions(); ext != nil {
			if status := ext.NormalizeScore(ctx, state, pod, scores); !status.IsSuccess() {
				return nil, framework.AsStatus(fmt.Errorf("normalizing scores of plugin %q: %w", p.Name(), status.AsError())).WithPlugin(p.Name())
			}
		}
		weight := f.scoreWeights[p.Name()]
		for i, ns := range scores {
			if ns.Score < framework.MinNodeScore || ns.Score > framework.MaxNodeScore {
				return nil, framework.AsStatus(fmt.Errorf("plugin %q scored node %q %d, outside [%d, %d]", p.Name(), ns.Name, ns.Score, framework.MinNodeScore, framework.MaxNodeScore)).WithPlugin(p.Name())
			}
			weighted := ns.Score * weight
			result[i].Scores = append(result[i].Scores, framework.PluginScore{Name: p.Name(), Score: weighted})
			result[i].TotalScore += weighted
		}
	}
	return result, nil
}

func (f *frameworkImpl) RunReservePluginsReserve(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeName string) *framework.Status {
	for _, p := range f.reserve {
		if s := p.Reserve(ctx, state, pod, nodeName); !s.IsSuccess() {
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

func (f *frameworkImpl) RunReservePluginsUnreserve(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeName string) {
	for i := len(f.reserve) - 1; i >= 0; i-- {
		f.reserve[i].Unreserve(ctx, state, pod, nodeName)
	}
}

func (f *frameworkImpl) RunPreBindPlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeName string) *framework.Status {
	for _, p := range f.preBind {
		if s := p.PreBind(ctx, state, pod, nodeName); !s.IsSuccess() {
			if !s.IsRejected() {
				return framework.AsStatus(fmt.Errorf("running PreBind plugin %q: %w", p.Name(), s.AsError())).WithPlugin(p.Name())
			}
			return s.WithPlugin(p.Name())
		}
	}
	return nil
}

func (f *frameworkImpl) RunBindPlugins(ctx context.Context, state *framework.CycleState, pod *v1.Pod, nodeName string) *framework.Status {
	p := f.bind[0]
	if s := p.Bind(ctx, state, pod, nodeName); !s.IsSuccess() {
		return s.WithPlugin(p.Name())
	}
	return nil
}
