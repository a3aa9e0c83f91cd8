// Package scheduler assigns pending pods to nodes, as kube-scheduler does:
// informers feed unscheduled pods into a scheduling queue and nodes and
// assigned pods into a cache; one loop pops a pod, runs the framework's
// filter and score plugins over a snapshot of the cache, assumes the pod on
// the chosen node and binds it asynchronously through pods/binding. A pod no
// node fits gets PodScheduled=False with kube's "0/N nodes are available:
// ..." message and waits for the cluster to change.
//
// Mirrors kube-scheduler's pkg/scheduler (scheduler.go, schedule_one.go,
// eventhandlers.go).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/kubeclient"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/scheduler/framework"
	"skiff.dev/services/scheduler/framework/plugins"
	"skiff.dev/services/scheduler/framework/plugins/names"
	"skiff.dev/services/scheduler/framework/plugins/volumebinding"
	"skiff.dev/services/scheduler/framework/runtime"
	internalcache "skiff.dev/services/scheduler/internal/cache"
	"skiff.dev/services/scheduler/internal/queue"
	"skiff.dev/services/scheduler/metrics"
)

// DefaultSchedulerName is the spec.schedulerName the scheduler serves when
// Config.SchedulerName is empty, and the name a pod without one is taken to
// ask for (the apiserver defaults it to this).
const DefaultSchedulerName = v1.DefaultSchedulerName

// Field selectors of the two pod informers, as kube-scheduler splits them:
// non-terminal pods not yet on a node go to the queue, non-terminal pods on a
// node go to the cache.
const (
	unscheduledPodsFieldSelector = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"
	assignedPodsFieldSelector    = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
)

// Config is what the scheduler needs to run.
type Config struct {
	// Client is the client-go clientset to the apiserver.
	Client kubernetes.Interface
	// SchedulerName selects the pods to schedule: those whose
	// spec.schedulerName equals it (default "default-scheduler").
	SchedulerName string
	// Recorder reports the Scheduled and FailedScheduling events on pods; nil records
	// none.
	Recorder record.EventRecorder
	// TracerProvider traces each scheduling cycle inside the pod's trace; nil means the
	// global provider.
	TracerProvider trace.TracerProvider
}

// Scheduler watches unscheduled pods and binds each to a node. Build it with
// New and start it with Run. Mirrors kube-scheduler's scheduler.Scheduler.
type Scheduler struct {
	client        kubernetes.Interface
	schedulerName string
	logger        *slog.Logger
	opts          options

	framework framework.Framework
	queue     *queue.PriorityQueue
	cache     internalcache.Cache
	// snapshot is read by the scheduling loop only.
	snapshot *internalcache.Snapshot
	rng      *rand.Rand
	metrics  *metrics.Metrics

	podInformer         toolscache.SharedIndexInformer // unscheduled pods
	podLister           corelisters.PodLister
	assignedPodInformer toolscache.SharedIndexInformer
	nodeInformer        toolscache.SharedIndexInformer
	// pdbInformer feeds preemption the PodDisruptionBudgets it tries not to violate.
	pdbInformer toolscache.SharedIndexInformer
	// informers holds the claims', volumes' and classes' informers.
	informers informers.SharedInformerFactory
	// nominator keeps the pods preemption nominated to nodes (the queue updates it).
	nominator *queue.Nominator

	recorder record.EventRecorder
	tracer   trace.Tracer

	started  atomic.Bool
	bindings sync.WaitGroup
}

// options are the timings tests shorten; production uses kube's defaults.
type options struct {
	podInitialBackoff     time.Duration
	podMaxBackoff         time.Duration
	podMaxInUnschedulable time.Duration
	backoffQFlushPeriod   time.Duration
	unschedulableFlush    time.Duration
	assumedPodTTL         time.Duration
	// volumeBindTimeout bounds VolumeBinding's wait in PreBind.
	volumeBindTimeout time.Duration
	// apiTimeout bounds a status update, so a hung apiserver cannot stall
	// the scheduling loop.
	apiTimeout time.Duration
	logger     *slog.Logger
}

type option func(*options)

func defaultOptions() options {
	return options{
		podInitialBackoff:     queue.DefaultPodInitialBackoffDuration,
		podMaxBackoff:         queue.DefaultPodMaxBackoffDuration,
		podMaxInUnschedulable: queue.DefaultPodMaxInUnschedulablePodsDuration,
		backoffQFlushPeriod:   queue.DefaultBackoffQFlushPeriod,
		unschedulableFlush:    queue.DefaultUnschedulableFlushPeriod,
		assumedPodTTL:         internalcache.DefaultAssumedPodTTL,
		volumeBindTimeout:     volumebinding.DefaultBindTimeout,
		apiTimeout:            30 * time.Second,
		logger:                slog.Default(),
	}
}

// New builds a scheduler with the default plugins (NodeUnschedulable,
// NodeAffinity, TaintToleration, NodeResourcesFit scoring LeastAllocated,
// DefaultBinder) and its informers. It does not
// contact the apiserver; Run does. It fails if cfg.Client is nil.
func New(cfg Config) (*Scheduler, error) {
	return newScheduler(cfg)
}

func newScheduler(cfg Config, opts ...option) (*Scheduler, error) {
	if cfg.Client == nil {
		return nil, errors.New("scheduler: Config.Client is nil")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	name := cfg.SchedulerName
	if name == "" {
		name = DefaultSchedulerName
	}
	logger := o.logger.With("component", "scheduler", "schedulerName", name)

	recorder := cfg.Recorder
	if recorder == nil {
		recorder = eventrecorder.Nop{}
	}
	snapshot := internalcache.NewEmptySnapshot()
	nominator := queue.NewNominator()
	pdbInformer := policyinformers.NewPodDisruptionBudgetInformer(cfg.Client, metav1.NamespaceAll, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	// The informers of what plugins read beyond pods and nodes: VolumeBinding's claims,
	// volumes and classes.
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTransform(kubeclient.TrimManagedFields))
	registry := plugins.NewInTreeRegistry()
	registry[names.VolumeBinding] = volumebinding.NewWithArgs(volumebinding.Args{BindTimeout: o.volumeBindTimeout})
	fwk, err := runtime.NewFramework(context.Background(), registry, plugins.DefaultProfile(name), cfg.Client, logger,
		runtime.WithSnapshotSharedLister(snapshot), runtime.WithPodNominator(nominator), runtime.WithEventRecorder(recorder),
		runtime.WithPDBLister(policylisters.NewPodDisruptionBudgetLister(pdbInformer.GetIndexer())),
		runtime.WithInformerFactory(factory))
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Scheduler{
		client:        cfg.Client,
		schedulerName: name,
		logger:        logger,
		opts:          o,
		framework:     fwk,
		queue: queue.NewPriorityQueue(fwk.QueueSortFunc(),
			queue.WithLogger(logger),
			queue.WithPodInitialBackoffDuration(o.podInitialBackoff),
			queue.WithPodMaxBackoffDuration(o.podMaxBackoff),
			queue.WithPodMaxInUnschedulablePodsDuration(o.podMaxInUnschedulable),
			queue.WithFlushPeriods(o.backoffQFlushPeriod, o.unschedulableFlush),
			queue.WithPodNominator(nominator),
		),
		nominator:   nominator,
		cache:       internalcache.New(internalcache.WithLogger(logger), internalcache.WithAssumedPodTTL(o.assumedPodTTL)),
		snapshot:    snapshot,
		rng:         rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		recorder:    recorder,
		tracer:      tracing.Tracer(cfg.TracerProvider, "skiff.dev/services/scheduler"),
		pdbInformer: pdbInformer,
		informers:   factory,
	}
	s.metrics = metrics.New(s.queue.Lengths)

	podIndexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
	s.podInformer = newPodInformer(cfg, podIndexers, unscheduledPodsFieldSelector)
	s.podLister = corelisters.NewPodLister(s.podInformer.GetIndexer())
	s.assignedPodInformer = newPodInformer(cfg, toolscache.Indexers{}, assignedPodsFieldSelector)
	s.nodeInformer = coreinformers.NewNodeInformer(cfg.Client, 0, toolscache.Indexers{})
	// The scheduler never reads managedFields; dropping them from what arrives keeps
	// every cached pod and node smaller (as kube-controller-manager's informers do).
	for _, informer := range []toolscache.SharedIndexInformer{s.podInformer, s.assignedPodInformer, s.nodeInformer, s.pdbInformer} {
		if err := informer.SetTransform(kubeclient.TrimManagedFields); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	if err := s.addAllEventHandlers(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return s, nil
}

// Metrics returns the scheduler's Prometheus collector
// (scheduler_schedule_attempts_total, scheduler_scheduling_attempt_duration_seconds,
// scheduler_pending_pods) for the binary to register; nothing is registered
// globally.
func (s *Scheduler) Metrics() prometheus.Collector {
	return s.metrics
}

// Run starts the informers, waits for their first list, then schedules
// pods one at a time until ctx is done. While the apiserver is unreachable
// the informers retry with backoff and scheduling simply finds nothing new;
// Run does not fail on it. On ctx done it stops the queue, waits for
// in-flight bindings and informers to finish, and returns nil. Calling Run
// twice is an error.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("scheduler: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.logger.Info("starting scheduler")

	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for _, inf := range []toolscache.SharedIndexInformer{s.podInformer, s.assignedPodInformer, s.nodeInformer, s.pdbInformer} {
		goRun(func() { inf.RunWithContext(ctx) })
	}
	s.informers.Start(ctx.Done())
	goRun(func() { s.queue.Run(ctx.Done()) })
	goRun(func() { s.cache.Run(ctx.Done()) })
	goRun(func() {
		<-ctx.Done()
		s.queue.Close()
	})

	synced := []toolscache.InformerSynced{s.podInformer.HasSynced, s.assignedPodInformer.HasSynced, s.nodeInformer.HasSynced, s.pdbInformer.HasSynced}
	for _, informer := range s.volumeInformers() {
		synced = append(synced, informer.HasSynced)
	}
	if toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		s.logger.Info("informer caches synced, scheduling")
		for ctx.Err() == nil {
			s.scheduleOne(ctx)
		}
	}

	cancel()
	wg.Wait()
	s.bindings.Wait()
	s.informers.Shutdown()
	s.logger.Info("scheduler stopped")
	return nil
}

// newPodInformer is an informer of the pods fieldSelector selects.
func newPodInformer(cfg Config, indexers toolscache.Indexers, fieldSelector string) toolscache.SharedIndexInformer {
	tweak := func(lo *metav1.ListOptions) { lo.FieldSelector = fieldSelector }
	return coreinformers.NewFilteredPodInformer(cfg.Client, metav1.NamespaceAll, 0, indexers, tweak)
}
