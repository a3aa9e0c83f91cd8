// Package podautoscaler is kube-controller-manager's horizontal-pod-autoscaler
// controller: every sync period it reads each HorizontalPodAutoscaler's target through
// the target's scale subresource, computes the replicas its metrics ask for (the
// largest over its metrics, through ReplicaCalculator), bounds them by minReplicas,
// maxReplicas and the scaling behavior (stabilization windows, scaling policies),
// writes the new count to the scale subresource and the autoscaler's status
// (currentReplicas, desiredReplicas, currentMetrics, lastScaleTime and the AbleToScale,
// ScalingActive and ScalingLimited conditions), and records kube's events. Metrics
// come from the resource, custom and external metrics APIs (MetricsClient); without a
// server behind them, each metric fails as in kube (ScalingActive False,
// FailedGetResourceMetric, FailedComputeMetricsReplicas) and only a target outside
// [minReplicas, maxReplicas] is scaled, into that range. Mirrors
// k8s.io/kubernetes/pkg/controller/podautoscaler.
package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	scaleclient "k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"skiff.dev/services/controllermanager/internal/worker"
)

// Name is the controller's name in kube-controller-manager's --controllers list.
const Name = "horizontal-pod-autoscaler-controller"

// EventSource is the component kube's controller records its events as.
const EventSource = "horizontal-pod-autoscaler"

// Defaults of kube-controller-manager's --horizontal-pod-autoscaler-* flags.
const (
	DefaultSyncPeriod                    = 15 * time.Second
	DefaultDownscaleStabilizationWindow  = 5 * time.Minute
	DefaultTolerance                     = 0.1
	DefaultCPUInitializationPeriod       = 5 * time.Minute
	DefaultDelayOfInitialReadinessStatus = 30 * time.Second
	DefaultWorkers                       = 5
)

// Without a behavior, a scale-up goes to at most twice the current count, or 4.
const (
	scaleUpLimitFactor  = 2.0
	scaleUpLimitMinimum = 4.0
)

// recommendation is a replica count the metrics asked for, and when.
type recommendation struct {
	replicas int32
	at       time.Time
}

// scaleEvent is a change of the target's replicas made by the controller (a count,
// never negative); outdated ones are reused for new events.
type scaleEvent struct {
	change   int32
	at       time.Time
	outdated bool
}

// Controller is the horizontal-pod-autoscaler controller.
type Controller struct {
	client   kubernetes.Interface
	scales   scaleclient.ScalesGetter
	mapper   apimeta.RESTMapper
	calc     *ReplicaCalculator
	recorder record.EventRecorder
	clock    clock.Clock
	log      *slog.Logger

	hpaLister autoscalinglisters.HorizontalPodAutoscalerLister
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]

	syncPeriod                   time.Duration
	downscaleStabilizationWindow time.Duration

	mu sync.Mutex
	// recommendations are the recent unstabilized recommendations per autoscaler key;
	// scaleUps and scaleDowns its recent scale events (with a behavior).
	recommendations      map[string][]recommendation
	scaleUps, scaleDowns map[string][]scaleEvent
	// selectors are the pod selectors of the autoscalers' targets, as last read, to
	// refuse pods that two autoscalers would scale.
	selectors map[string]labels.Selector
}

// Config is what New builds the controller from.
type Config struct {
	// Factory gives the autoscaling/v2 HorizontalPodAutoscaler and Pod informers.
	// Start it after New.
	Factory informers.SharedInformerFactory
	// Client writes the autoscalers' status.
	Client kubernetes.Interface
	// Scales reads and writes targets' scale subresource; Mapper maps a target's kind
	// to its resource.
	Scales scaleclient.ScalesGetter
	Mapper apimeta.RESTMapper
	// Metrics reads the metrics APIs.
	Metrics MetricsClient
	// Recorder records the controller's events.
	Recorder record.EventRecorder
	// SyncPeriod is how often each autoscaler is reconciled
	// (--horizontal-pod-autoscaler-sync-period); 0 means DefaultSyncPeriod.
	SyncPeriod time.Duration
	// DownscaleStabilizationWindow is how far back the highest recommendation holds a
	// scale-down (--horizontal-pod-autoscaler-downscale-stabilization); 0 means the
	// default.
	DownscaleStabilizationWindow time.Duration
	// Tolerance is the usage ratio's distance to 1 within which nothing changes
	// (--horizontal-pod-autoscaler-tolerance); 0 means the default.
	Tolerance float64
	// CPUInitializationPeriod and DelayOfInitialReadinessStatus are
	// --horizontal-pod-autoscaler-cpu-initialization-period and
	// --horizontal-pod-autoscaler-initial-readiness-delay; 0 means the default.
	CPUInitializationPeriod       time.Duration
	DelayOfInitialReadinessStatus time.Duration
	// Clock is the controller's time; nil means the real clock.
	Clock clock.Clock
}

// fixedInterval is a rate limiter that delays every key by the same interval: each
// autoscaler is reconciled once per sync period, whatever its changes. Mirrors
// FixedItemIntervalRateLimiter.
type fixedInterval struct{ interval time.Duration }

func (r fixedInterval) When(string) time.Duration { return r.interval }
func (r fixedInterval) NumRequeues(string) int    { return 1 }
func (r fixedInterval) Forget(string)             {}

// New builds the controller and registers its informers' handlers. Mirrors
// NewHorizontalController.
func New(cfg Config) *Controller {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	tolerance := cfg.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	period := or(cfg.SyncPeriod, DefaultSyncPeriod)
	hpas := cfg.Factory.Autoscaling().V2().HorizontalPodAutoscalers()
	pods := cfg.Factory.Core().V1().Pods()
	c := &Controller{
		client: cfg.Client, scales: cfg.Scales, mapper: cfg.Mapper, recorder: cfg.Recorder, clock: clk,
		log:       slog.With("controller", Name),
		hpaLister: hpas.Lister(), podLister: pods.Lister(),
		synced: []cache.InformerSynced{hpas.Informer().HasSynced, pods.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig[string](fixedInterval{period},
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "horizontalpodautoscaler"}),
		syncPeriod:                   period,
		downscaleStabilizationWindow: or(cfg.DownscaleStabilizationWindow, DefaultDownscaleStabilizationWindow),
		recommendations:              map[string][]recommendation{},
		scaleUps:                     map[string][]scaleEvent{},
		scaleDowns:                   map[string][]scaleEvent{},
		selectors:                    map[string]labels.Selector{},
	}
	c.calc = &ReplicaCalculator{Metrics: cfg.Metrics, Pods: c.podLister, Tolerance: tolerance,
		CPUInitializationPeriod:       or(cfg.CPUInitializationPeriod, DefaultCPUInitializationPeriod),
		DelayOfInitialReadinessStatus: or(cfg.DelayOfInitialReadinessStatus, DefaultDelayOfInitialReadinessStatus)}
	_, _ = hpas.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur interface{}) { c.enqueue(cur) },
		DeleteFunc: c.forget,
	}, period)
	return c
}

// Run reconciles autoscalers with workers workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, c.queue, c.synced, workers, c.log, c.sync)
}

// enqueue schedules the autoscaler's next reconcile one sync period from now (a key
// already waiting keeps its earlier turn), as kube's controller does: a change is acted
// on within a period, not at once.
func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.AddRateLimited(key)
}

func (c *Controller) forget(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Forget(key)
	c.mu.Lock()
	delete(c.selectors, key)
	c.mu.Unlock()
}

// sync reconciles one autoscaler and looks at it again one sync period later; a deleted
// one's recommendations and scale events are forgotten.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	hpa, err := c.hpaLister.HorizontalPodAutoscalers(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.recommendations, key)
		delete(c.scaleUps, key)
		delete(c.scaleDowns, key)
		delete(c.selectors, key)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.reconcile(ctx, hpa, key); err != nil {
		c.log.Warn("reconciling autoscaler", "key", key, "err", err)
	}
	return &worker.Requeue{After: c.syncPeriod}
}

// reconcile is one pass over one autoscaler. Mirrors reconcileAutoscaler.
func (c *Controller) reconcile(ctx context.Context, shared *autoscalingv2.HorizontalPodAutoscaler, key string) (retErr error) {
	hpa := shared.DeepCopy()
	original := hpa.Status.DeepCopy()
	ref := hpa.Spec.ScaleTargetRef
	reference := fmt.Sprintf("%s/%s/%s", ref.Kind, hpa.Namespace, ref.Name)

	failedGetScale := func(err error) {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedGetScale", err.Error())
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale", "the HPA controller was unable to get the target's current scale: %v", err)
		c.updateStatusIfNeeded(ctx, original, hpa)
	}
	targetGV, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("invalid API version in scale target reference: %v", err)
	}
	mappings, err := c.mapper.RESTMappings(schema.GroupKind{Group: targetGV.Group, Kind: ref.Kind})
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("unable to determine resource for scale target reference: %v", err)
	}
	scale, targetGR, err := c.scaleFor(ctx, hpa.Namespace, ref.Name, mappings)
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("failed to query scale subresource for %s: %v", reference, err)
	}
	setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale", "the HPA controller was able to get the target's current scale")
	current := scale.Spec.Replicas
	c.recordInitialRecommendation(current, key)

	minReplicas := int32(1)
	if hpa.Spec.MinReplicas != nil {
		minReplicas = *hpa.Spec.MinReplicas
	}
	var (
		statuses []autoscalingv2.MetricStatus
		desired  int32
		reason   string
		rescale  = true
	)
	switch {
	case current == 0 && minReplicas != 0:
		desired, rescale = 0, false
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")
	case current > hpa.Spec.MaxReplicas:
		reason, desired = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas
	case current < minReplicas:
		reason, desired = "Current number of replicas below Spec.MinReplicas", minReplicas
	default:
		metricDesired, metricName, metricStatuses, err := c.computeReplicasForMetrics(ctx, hpa, scale, hpa.Spec.Metrics)
		statuses = metricStatuses
		if err != nil && metricDesired == -1 {
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false)
			c.updateStatusIfNeeded(ctx, original, hpa)
			c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedComputeMetricsReplicas", err.Error())
			return fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %v", reference, err)
		}
		retErr = err // some metrics failed, the others still scale
		if metricDesired > desired {
			desired = metricDesired
		}
		if desired > current {
			reason = metricName + " above target"
		}
		if desired < current {
			reason = "All metrics below target"
		}
		if hpa.Spec.Behavior == nil {
			desired = c.normalizeDesiredReplicas(hpa, key, current, desired, minReplicas)
		} else {
			desired = c.normalizeDesiredReplicasWithBehaviors(hpa, key, current, desired, minReplicas)
		}
		rescale = desired != current
	}

	if rescale {
		scale.Spec.Replicas = desired
		if _, err := c.scales.Scales(hpa.Namespace).Update(ctx, targetGR, scale, metav1.UpdateOptions{}); err != nil {
			c.recorder.Eventf(hpa, corev1.EventTypeWarning, "FailedRescale", "New size: %d; reason: %s; error: %v", desired, reason, err.Error())
			setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale", "the HPA controller was unable to update the target scale: %v", err)
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false)
			c.updateStatusIfNeeded(ctx, original, hpa)
			return fmt.Errorf("failed to rescale %s: %v", reference, err)
		}
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", "the HPA controller was able to update the target scale to %d", desired)
		c.recorder.Eventf(hpa, corev1.EventTypeNormal, "SuccessfulRescale", "New size: %d; reason: %s", desired, reason)
		c.storeScaleEvent(hpa.Spec.Behavior, key, current, desired)
		c.log.Info("rescaled", "hpa", key, "currentReplicas", current, "desiredReplicas", desired, "reason", reason)
	} else {
		desired = current
	}
	c.setStatus(hpa, current, desired, statuses, rescale)
	if err := c.updateStatusIfNeeded(ctx, original, hpa); err != nil {
		return err
	}
	return retErr
}

// scaleFor reads the scale of the first mapping that serves one; the first error
// otherwise.
func (c *Controller) scaleFor(ctx context.Context, namespace, name string, mappings []*apimeta.RESTMapping) (*autoscalingv1.Scale, schema.GroupResource, error) {
	var firstErr error
	for i, m := range mappings {
		gr := m.Resource.GroupResource()
		scale, err := c.scales.Scales(namespace).Get(ctx, gr, name, metav1.GetOptions{})
		if err == nil {
			return scale, gr, nil
		}
		if i == 0 {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = errors.New("unrecognized resource")
	}
	return nil, schema.GroupResource{}, firstErr
}

// computeReplicasForMetrics is the largest proposal over the metrics, with the name of
// the metric that made it and every metric's status. When every metric failed, or some
// failed and the rest would scale down, it returns -1, sets the first failure's
// condition and an error; otherwise ScalingActive True (and the error of any failed
// metric). Mirrors computeReplicasForMetrics.
func (c *Controller) computeReplicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale, specs []autoscalingv2.MetricSpec) (int32, string, []autoscalingv2.MetricStatus, error) {
	selector, err := c.validateAndParseSelector(hpa, scale.Status.Selector)
	if err != nil {
		return -1, "", nil, err
	}
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	var (
		replicas     int32
		metric       string
		invalid      int
		firstErr     error
		firstInvalid autoscalingv2.HorizontalPodAutoscalerCondition
	)
	for i, spec := range specs {
		proposal, name, condition, err := c.computeReplicasForMetric(ctx, hpa, spec, scale.Spec.Replicas, scale.Status.Replicas, selector, &statuses[i])
		if err != nil {
			if invalid == 0 {
				firstInvalid, firstErr = condition, err
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%v invalid out of %v), first error is: %v", invalid, len(specs), firstErr)
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < scale.Spec.Replicas) {
		setCondition(hpa, firstInvalid.Type, firstInvalid.Status, firstInvalid.Reason, "%s", firstInvalid.Message)
		return -1, "", statuses, firstErr
	}
	setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from %s", metric)
	return replicas, metric, statuses, firstErr
}

// validateAndParseSelector parses the target's pod selector, refusing an empty one, one
// that does not parse and one whose pods another autoscaler's target also selects
// (ScalingActive False, with kube's reasons and events).
func (c *Controller) validateAndParseSelector(hpa *autoscalingv2.HorizontalPodAutoscaler, selector string) (labels.Selector, error) {
	if selector == "" {
		msg := "selector is required"
		c.recorder.Event(hpa, corev1.EventTypeWarning, "SelectorRequired", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector")
		return nil, errors.New(msg)
	}
	parsed, err := labels.Parse(selector)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "InvalidSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "%s", msg)
		return nil, errors.New(msg)
	}
	key := hpa.Namespace + "/" + hpa.Name
	c.mu.Lock()
	c.selectors[key] = parsed
	others := map[string]labels.Selector{}
	for k, s := range c.selectors {
		if strings.HasPrefix(k, hpa.Namespace+"/") {
			others[k] = s
		}
	}
	c.mu.Unlock()
	pods, err := c.podLister.Pods(hpa.Namespace).List(parsed)
	if err != nil {
		return nil, err
	}
	controlling := map[string]bool{}
	for _, pod := range pods {
		for k, s := range others {
			if s.Matches(labels.Set(pod.Labels)) {
				controlling[k] = true
			}
		}
	}
	if len(controlling) > 1 {
		var keys []string
		for k := range controlling {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		msg := fmt.Sprintf("pods by selector %v are controlled by multiple HPAs: %v", selector, keys)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "AmbiguousSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector", "%s", msg)
		return nil, errors.New(msg)
	}
	return parsed, nil
}

// unableToCompute records the event of a metric that failed and returns its
// ScalingActive False condition.
func (c *Controller) unableToCompute(hpa *autoscalingv2.HorizontalPodAutoscaler, reason string, err error) autoscalingv2.HorizontalPodAutoscalerCondition {
	c.recorder.Event(hpa, corev1.EventTypeWarning, reason, err.Error())
	return autoscalingv2.HorizontalPodAutoscalerCondition{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, Reason: reason,
		Message: fmt.Sprintf("the HPA was unable to compute the replica count: %v", err)}
}

// computeReplicasForMetric proposes replicas for one metric and fills its status; on
// failure it returns the condition to set. Mirrors computeReplicasForMetric.
func (c *Controller) computeReplicasForMetric(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec, specReplicas, statusReplicas int32,
	selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	none := autoscalingv2.HorizontalPodAutoscalerCondition{}
	milli := func(v int64) *resource.Quantity { return resource.NewMilliQuantity(v, resource.DecimalSI) }
	switch spec.Type {
	case autoscalingv2.ObjectMetricSourceType:
		src := spec.Object
		metricSelector, err := metav1.LabelSelectorAsSelector(src.Metric.Selector)
		if err != nil {
			return 0, "", c.unableToCompute(hpa, "FailedGetObjectMetric", err), fmt.Errorf("failed to get object metric value: %v", err)
		}
		id := autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector}
		switch {
		case src.Target.Type == autoscalingv2.ValueMetricType && src.Target.Value != nil:
			replicas, usage, _, err := c.calc.GetObjectMetricReplicas(ctx, specReplicas, src.Target.Value.MilliValue(), src.Metric.Name, hpa.Namespace, &src.DescribedObject, selector, metricSelector)
			if err != nil {
				return 0, "", c.unableToCompute(hpa, "FailedGetObjectMetric", err), fmt.Errorf("failed to get object metric value: %v", err)
			}
			*status = autoscalingv2.MetricStatus{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
				DescribedObject: src.DescribedObject, Metric: id, Current: autoscalingv2.MetricValueStatus{Value: milli(usage)}}}
			return replicas, fmt.Sprintf("%s metric %s", src.DescribedObject.Kind, src.Metric.Name), none, nil
		case src.Target.Type == autoscalingv2.AverageValueMetricType && src.Target.AverageValue != nil:
			replicas, usage, _, err := c.calc.GetObjectPerPodMetricReplicas(ctx, statusReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, hpa.Namespace, &src.DescribedObject, metricSelector)
			if err != nil {
				return 0, "", c.unableToCompute(hpa, "FailedGetObjectMetric", err), fmt.Errorf("failed to get object metric value: failed to get %s object metric: %v", src.Metric.Name, err)
			}
			*status = autoscalingv2.MetricStatus{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
				Metric: id, Current: autoscalingv2.MetricValueStatus{AverageValue: milli(usage)}}}
			return replicas, fmt.Sprintf("external metric %s(%+v)", src.Metric.Name, src.Metric.Selector), none, nil
		}
		err = errors.New("invalid object metric source: neither a value target nor an average value target was set")
		return 0, "", c.unableToCompute(hpa, "FailedGetObjectMetric", err), fmt.Errorf("failed to get object metric value: %v", err)
	case autoscalingv2.PodsMetricSourceType:
		src := spec.Pods
		metricSelector, err := metav1.LabelSelectorAsSelector(src.Metric.Selector)
		if err != nil {
			return 0, "", c.unableToCompute(hpa, "FailedGetPodsMetric", err), fmt.Errorf("failed to get pods metric value: %v", err)
		}
		replicas, usage, _, err := c.calc.GetMetricReplicas(ctx, specReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, hpa.Namespace, selector, metricSelector)
		if err != nil {
			return 0, "", c.unableToCompute(hpa, "FailedGetPodsMetric", err), fmt.Errorf("failed to get pods metric value: %v", err)
		}
		*status = autoscalingv2.MetricStatus{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{
			Metric: autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector}, Current: autoscalingv2.MetricValueStatus{AverageValue: milli(usage)}}}
		return replicas, "pods metric " + src.Metric.Name, none, nil
	case autoscalingv2.ResourceMetricSourceType:
		src := spec.Resource
		replicas, current, name, err := c.resourceReplicas(ctx, specReplicas, src.Target, src.Name, hpa.Namespace, "", selector, spec.Type)
		if err != nil {
			return 0, "", c.unableToCompute(hpa, "FailedGetResourceMetric", err), fmt.Errorf("failed to get %s resource metric value: %v", src.Name, err)
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Resource: &autoscalingv2.ResourceMetricStatus{Name: src.Name, Current: *current}}
		return replicas, name, none, nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		src := spec.ContainerResource
		replicas, current, name, err := c.resourceReplicas(ctx, specReplicas, src.Target, src.Name, hpa.Namespace, src.Container, selector, spec.Type)
		if err != nil {
			return 0, "", c.unableToCompute(hpa, "FailedGetContainerResourceMetric", err), fmt.Errorf("failed to get %s container metric value: %v", src.Container, err)
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: src.Name, Container: src.Container, Current: *current}}
		return replicas, name, none, nil
	case autoscalingv2.ExternalMetricSourceType:
		src := spec.External
		id := autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector}
		name := fmt.Sprintf("external metric %s(%+v)", src.Metric.Name, src.Metric.Selector)
		switch {
		case src.Target.AverageValue != nil:
			replicas, usage, _, err := c.calc.GetExternalPerPodMetricReplicas(ctx, statusReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, hpa.Namespace, src.Metric.Selector)
			if err != nil {
				err = fmt.Errorf("failed to get %s external metric: %v", src.Metric.Name, err)
				return 0, "", c.unableToCompute(hpa, "FailedGetExternalMetric", err), fmt.Errorf("failed to get %s external metric value: %v", src.Metric.Name, err)
			}
			*status = autoscalingv2.MetricStatus{Type: spec.Type, External: &autoscalingv2.ExternalMetricStatus{Metric: id, Current: autoscalingv2.MetricValueStatus{AverageValue: milli(usage)}}}
			return replicas, name, none, nil
		case src.Target.Value != nil:
			replicas, usage, _, err := c.calc.GetExternalMetricReplicas(ctx, specReplicas, src.Target.Value.MilliValue(), src.Metric.Name, hpa.Namespace, src.Metric.Selector, selector)
			if err != nil {
				err = fmt.Errorf("failed to get external metric %s: %v", src.Metric.Name, err)
				return 0, "", c.unableToCompute(hpa, "FailedGetExternalMetric", err), fmt.Errorf("failed to get %s external metric value: %v", src.Metric.Name, err)
			}
			*status = autoscalingv2.MetricStatus{Type: spec.Type, External: &autoscalingv2.ExternalMetricStatus{Metric: id, Current: autoscalingv2.MetricValueStatus{Value: milli(usage)}}}
			return replicas, name, none, nil
		}
		err := errors.New("invalid external metric source: neither a value target nor an average value target was set")
		return 0, "", c.unableToCompute(hpa, "FailedGetExternalMetric", err), fmt.Errorf("failed to get %s external metric value: %v", src.Metric.Name, err)
	}
	err := fmt.Errorf("unknown metric source type %q", string(spec.Type))
	return 0, "", c.unableToCompute(hpa, "InvalidMetricSourceType", err), err
}

// resourceReplicas proposes replicas for a (container) resource metric: by raw usage
// for an averageValue target, by utilization of the requests otherwise. Mirrors
// computeStatusForResourceMetricGeneric.
func (c *Controller) resourceReplicas(ctx context.Context, currentReplicas int32, target autoscalingv2.MetricTarget, name corev1.ResourceName, namespace, container string,
	selector labels.Selector, sourceType autoscalingv2.MetricSourceType) (int32, *autoscalingv2.MetricValueStatus, string, error) {
	if target.AverageValue != nil {
		replicas, usage, _, err := c.calc.GetRawResourceReplicas(ctx, currentReplicas, target.AverageValue.MilliValue(), name, namespace, selector, container)
		if err != nil {
			return 0, nil, "", fmt.Errorf("failed to get %s usage: %v", name, err)
		}
		return replicas, &autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(usage, resource.DecimalSI)}, string(name) + " resource", nil
	}
	if target.AverageUtilization == nil {
		return 0, nil, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	replicas, utilization, raw, _, err := c.calc.GetResourceReplicas(ctx, currentReplicas, *target.AverageUtilization, name, namespace, selector, container)
	if err != nil {
		return 0, nil, "", fmt.Errorf("failed to get %s utilization: %v", name, err)
	}
	metricName := fmt.Sprintf("%s resource utilization (percentage of request)", name)
	if sourceType == autoscalingv2.ContainerResourceMetricSourceType {
		metricName = fmt.Sprintf("%s container resource utilization (percentage of request)", name)
	}
	return replicas, &autoscalingv2.MetricValueStatus{AverageUtilization: &utilization, AverageValue: resource.NewMilliQuantity(raw, resource.DecimalSI)}, metricName, nil
}

func (c *Controller) recordInitialRecommendation(current int32, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recommendations[key] == nil {
		c.recommendations[key] = []recommendation{{current, c.clock.Now()}}
	}
}

// stabilizeRecommendation records desired and returns the highest recommendation of
// the downscale stabilization window (desired included). Mirrors stabilizeRecommendation.
func (c *Controller) stabilizeRecommendation(key string, desired int32) int32 {
	now := c.clock.Now()
	cutoff := now.Add(-c.downscaleStabilizationWindow)
	highest := desired
	old := -1
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.recommendations[key] {
		if r.at.Before(cutoff) {
			old = i
		} else if r.replicas > highest {
			highest = r.replicas
		}
	}
	if old >= 0 {
		c.recommendations[key][old] = recommendation{desired, now}
	} else {
		c.recommendations[key] = append(c.recommendations[key], recommendation{desired, now})
	}
	return highest
}

// normalizeDesiredReplicas bounds an autoscaler without a behavior: the downscale
// stabilization window, then [minReplicas, maxReplicas] and at most
// max(2×current, 4), with the AbleToScale and ScalingLimited conditions. Mirrors
// normalizeDesiredReplicas.
func (c *Controller) normalizeDesiredReplicas(hpa *autoscalingv2.HorizontalPodAutoscaler, key string, current, desired, minReplicas int32) int32 {
	stabilized := c.stabilizeRecommendation(key, desired)
	if stabilized != desired {
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation")
	} else {
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	out, reason, message := convertDesiredReplicasWithRules(current, stabilized, minReplicas, hpa.Spec.MaxReplicas)
	status := corev1.ConditionTrue
	if out == stabilized {
		status = corev1.ConditionFalse
	}
	setCondition(hpa, autoscalingv2.ScalingLimited, status, reason, "%s", message)
	return out
}

// convertDesiredReplicasWithRules bounds desired by minReplicas and by the lower of
// maxReplicas and the scale-up limit, naming the bound that applied. Mirrors
// convertDesiredReplicasWithRules.
func convertDesiredReplicasWithRules(current, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	scaleUpLimit := int32(math.Max(scaleUpLimitFactor*float64(current), scaleUpLimitMinimum))
	maximum, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if maxReplicas > scaleUpLimit {
		maximum, reason, message = scaleUpLimit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	if desired < minReplicas {
		return minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
	}
	if desired > maximum {
		return maximum, reason, message
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// normalizationArg is what normalizing with a behavior works from.
type normalizationArg struct {
	key                string
	scaleUp, scaleDown *autoscalingv2.HPAScalingRules
	minReplicas, maxReplicas,
	current, desired int32
}

// normalizeDesiredReplicasWithBehaviors bounds an autoscaler with a behavior: its
// stabilization windows, then its scaling policies' rates and [minReplicas,
// maxReplicas], with the AbleToScale and ScalingLimited conditions. Mirrors
// normalizeDesiredReplicasWithBehaviors.
func (c *Controller) normalizeDesiredReplicasWithBehaviors(hpa *autoscalingv2.HorizontalPodAutoscaler, key string, current, desired, minReplicas int32) int32 {
	b := hpa.Spec.Behavior
	if b.ScaleDown != nil && b.ScaleDown.StabilizationWindowSeconds == nil {
		w := int32(c.downscaleStabilizationWindow.Seconds())
		b.ScaleDown.StabilizationWindowSeconds = &w
	}
	arg := normalizationArg{key: key, scaleUp: b.ScaleUp, scaleDown: b.ScaleDown, minReplicas: minReplicas,
		maxReplicas: hpa.Spec.MaxReplicas, current: current, desired: desired}
	stabilized, reason, message := c.stabilizeRecommendationWithBehaviors(arg)
	arg.desired = stabilized
	if stabilized != desired {
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, reason, "%s", message)
	} else {
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	out, reason, message := c.convertDesiredReplicasWithBehaviorRate(arg)
	status := corev1.ConditionTrue
	if out == stabilized {
		status = corev1.ConditionFalse
	}
	setCondition(hpa, autoscalingv2.ScalingLimited, status, reason, "%s", message)
	return out
}

// stabilizeRecommendationWithBehaviors keeps the count between the lowest
// recommendation of the scale-up window and the highest of the scale-down window
// (starting from the current count), and records desired. Mirrors
// stabilizeRecommendationWithBehaviors.
func (c *Controller) stabilizeRecommendationWithBehaviors(arg normalizationArg) (int32, string, string) {
	now := c.clock.Now()
	up, down := arg.desired, arg.desired
	upCutoff := now.Add(-time.Second * time.Duration(*arg.scaleUp.StabilizationWindowSeconds))
	downCutoff := now.Add(-time.Second * time.Duration(*arg.scaleDown.StabilizationWindowSeconds))
	old := -1
	c.mu.Lock()
	for i, r := range c.recommendations[arg.key] {
		if r.at.After(upCutoff) {
			up = min(r.replicas, up)
		}
		if r.at.After(downCutoff) {
			down = max(r.replicas, down)
		}
		if r.at.Before(upCutoff) && r.at.Before(downCutoff) {
			old = i
		}
	}
	if old >= 0 {
		c.recommendations[arg.key][old] = recommendation{arg.desired, now}
	} else {
		c.recommendations[arg.key] = append(c.recommendations[arg.key], recommendation{arg.desired, now})
	}
	c.mu.Unlock()
	out := max(arg.current, up)
	out = min(out, down)
	if arg.desired >= arg.current {
		return out, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return out, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// convertDesiredReplicasWithBehaviorRate bounds the stabilized count by the policies'
// rates (over the scale events of each policy's period) and by [minReplicas,
// maxReplicas]. Mirrors convertDesiredReplicasWithBehaviorRate.
func (c *Controller) convertDesiredReplicasWithBehaviorRate(arg normalizationArg) (int32, string, string) {
	c.mu.Lock()
	ups, downs := c.scaleUps[arg.key], c.scaleDowns[arg.key]
	c.mu.Unlock()
	now := c.clock.Now()
	switch {
	case arg.desired > arg.current:
		limit := max(scaleUpLimit(now, arg.current, ups, downs, arg.scaleUp), arg.current)
		maximum, reason, message := arg.maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maximum > limit {
			maximum, reason, message = limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if arg.desired > maximum {
			return maximum, reason, message
		}
	case arg.desired < arg.current:
		limit := min(scaleDownLimit(now, arg.current, ups, downs, arg.scaleDown), arg.current)
		minimum, reason, message := arg.minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minimum < limit {
			minimum, reason, message = limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if arg.desired < minimum {
			return minimum, reason, message
		}
	}
	return arg.desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// changeInPeriod sums the changes of the events within periodSeconds of now.
func changeInPeriod(now time.Time, periodSeconds int32, events []scaleEvent) int32 {
	cutoff := now.Add(-time.Second * time.Duration(periodSeconds))
	var n int32
	for _, e := range events {
		if e.at.After(cutoff) {
			n += e.change
		}
	}
	return n
}

// scaleUpLimit is the most replicas rules allow now: per policy, the count at the
// start of its period plus its pods or percent (rounded up), the policies' largest
// (Max) or smallest (Min); the current count when Disabled. Mirrors
// calculateScaleUpLimitWithScalingRules.
func scaleUpLimit(now time.Time, current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pickMin := *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect
	result := int32(math.MinInt32)
	if pickMin {
		result = math.MaxInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(now, p.PeriodSeconds, ups) + changeInPeriod(now, p.PeriodSeconds, downs)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		if pickMin {
			result = min(result, proposed)
		} else {
			result = max(result, proposed)
		}
	}
	return result
}

// scaleDownLimit is the fewest replicas rules allow now: per policy, the count at the
// start of its period less its pods or percent (rounded down), the policies' smallest
// (Max) or largest (Min); the current count when Disabled. Mirrors
// calculateScaleDownLimitWithBehaviors.
func scaleDownLimit(now time.Time, current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pickMax := *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect
	result := int32(math.MaxInt32)
	if pickMax {
		result = math.MinInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(now, p.PeriodSeconds, ups) + changeInPeriod(now, p.PeriodSeconds, downs)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		if pickMax {
			result = max(result, proposed)
		} else {
			result = min(result, proposed)
		}
	}
	return result
}

// storeScaleEvent records a change made with a behavior, reusing an event older than
// the direction's longest policy period. Mirrors storeScaleEvent.
func (c *Controller) storeScaleEvent(behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, key string, prev, next int32) {
	if behavior == nil {
		return
	}
	now := c.clock.Now()
	events, rules, change := c.scaleUps, behavior.ScaleUp, next-prev
	if next <= prev {
		events, rules, change = c.scaleDowns, behavior.ScaleDown, prev-next
	}
	var longest int32
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	cutoff := now.Add(-time.Second * time.Duration(longest))
	c.mu.Lock()
	defer c.mu.Unlock()
	list := events[key]
	reuse := -1
	for i := range list {
		if list[i].at.Before(cutoff) {
			list[i].outdated = true
		}
		if list[i].outdated {
			reuse = i
		}
	}
	e := scaleEvent{change: change, at: now}
	if reuse >= 0 {
		list[reuse] = e
	} else {
		list = append(list, e)
	}
	events[key] = list
}

// setStatus rewrites the status: current and desired replicas and the metric
// statuses, keeping the conditions, and lastScaleTime now when the target was
// rescaled.
func (c *Controller) setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32, statuses []autoscalingv2.MetricStatus, rescaled bool) {
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		CurrentReplicas: current, DesiredReplicas: desired, LastScaleTime: hpa.Status.LastScaleTime,
		CurrentMetrics: statuses, Conditions: hpa.Status.Conditions,
	}
	if rescaled {
		now := metav1.NewTime(c.clock.Now())
		hpa.Status.LastScaleTime = &now
	}
}

// updateStatusIfNeeded writes hpa's status when it differs from old; a failure is
// recorded as a FailedUpdateStatus event and returned.
func (c *Controller) updateStatusIfNeeded(ctx context.Context, old *autoscalingv2.HorizontalPodAutoscalerStatus, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if apiequality.Semantic.DeepEqual(old, &hpa.Status) {
		return nil
	}
	if _, err := c.client.AutoscalingV2().HorizontalPodAutoscalers(hpa.Namespace).UpdateStatus(ctx, hpa, metav1.UpdateOptions{}); err != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		return fmt.Errorf("failed to update status for %s: %v", hpa.Name, err)
	}
	return nil
}

// setCondition sets condition typ (added when missing), moving its
// lastTransitionTime only when its status changes.
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, message string, args ...interface{}) {
	var cond *autoscalingv2.HorizontalPodAutoscalerCondition
	for i := range hpa.Status.Conditions {
		if hpa.Status.Conditions[i].Type == typ {
			cond = &hpa.Status.Conditions[i]
			break
		}
	}
	if cond == nil {
		hpa.Status.Conditions = append(hpa.Status.Conditions, autoscalingv2.HorizontalPodAutoscalerCondition{Type: typ})
		cond = &hpa.Status.Conditions[len(hpa.Status.Conditions)-1]
	}
	if cond.Status != status {
		cond.LastTransitionTime = metav1.Now()
	}
	cond.Status, cond.Reason, cond.Message = status, reason, fmt.Sprintf(message, args...)
}
