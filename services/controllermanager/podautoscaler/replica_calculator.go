package podautoscaler

import (
	"context"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// ReplicaCalculator turns a metric's current value and target into a replica count:
// the usage ratio (current / target) times the pods that count, rounded up, unless the
// ratio is within Tolerance of 1. Pods being deleted or Failed are ignored; Pending
// pods, and for cpu pods not yet ready (or still in their CPU initialization period
// with a sample older than their readiness), count only on a scale-up, as using
// nothing; pods without a sample count as using nothing on a scale-up and their whole
// request (or the target) on a scale-down; a result that would reverse the direction
// keeps the current count. Mirrors kube's podautoscaler.ReplicaCalculator.
type ReplicaCalculator struct {
	Metrics   MetricsClient
	Pods      corelisters.PodLister
	Tolerance float64
	// CPUInitializationPeriod is how long after its start a pod's cpu sample is used
	// only when taken after it became ready.
	CPUInitializationPeriod time.Duration
	// DelayOfInitialReadinessStatus is how long after its start a pod that was never
	// ready is taken as still starting up.
	DelayOfInitialReadinessStatus time.Duration
}

// GetResourceReplicas proposes replicas for a resource (or one container's resource)
// at targetUtilization percent of the pods' requests; it returns the current
// utilization (percent) and average usage (milli-units).
func (c *ReplicaCalculator) GetResourceReplicas(ctx context.Context, currentReplicas, targetUtilization int32, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (replicas, utilization int32, rawUtilization int64, timestamp time.Time, err error) {
	metrics, timestamp, err := c.Metrics.GetResourceMetric(ctx, resource, namespace, selector, container)
	if err != nil {
		return 0, 0, 0, time.Time{}, fmt.Errorf("unable to get metrics for resource %s: %v", resource, err)
	}
	pods, err := c.Pods.Pods(namespace).List(selector)
	if err != nil {
		return 0, 0, 0, time.Time{}, fmt.Errorf("unable to get pods while calculating replica count: %v", err)
	}
	if len(pods) == 0 {
		return 0, 0, 0, time.Time{}, fmt.Errorf("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := c.groupPods(pods, metrics, resource)
	removeMetrics(metrics, ignored)
	removeMetrics(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, 0, time.Time{}, fmt.Errorf("did not receive metrics for targeted pods (pods might be unready)")
	}
	requests, err := podRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, time.Time{}, err
	}
	ratio, utilization, rawUtilization, err := utilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, 0, 0, time.Time{}, err
	}
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if math.Abs(1.0-ratio) <= c.Tolerance {
			return currentReplicas, utilization, rawUtilization, timestamp, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), utilization, rawUtilization, timestamp, nil
	}
	if len(missing) > 0 {
		switch {
		case ratio < 1.0:
			// A scale-down takes a pod without a sample as using its whole request (or
			// the target, when that is above 100 %).
			fallback := int64(max(100, targetUtilization))
			for name := range missing {
				metrics[name] = PodMetric{Value: requests[name] * fallback / 100}
			}
		case ratio > 1.0:
			for name := range missing {
				metrics[name] = PodMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = PodMetric{Value: 0}
		}
	}
	newRatio, _, _, err := utilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, utilization, rawUtilization, time.Time{}, err
	}
	return c.settle(currentReplicas, ratio, newRatio, len(metrics)), utilization, rawUtilization, timestamp, nil
}

// settle is the proposal once missing and unready pods are counted in: the current
// count when the new ratio is within tolerance or turns the direction around, or when
// the count would move against the ratio; else ratio × pods, rounded up.
func (c *ReplicaCalculator) settle(currentReplicas int32, ratio, newRatio float64, pods int) int32 {
	if math.Abs(1.0-newRatio) <= c.Tolerance || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return currentReplicas
	}
	proposal := int32(math.Ceil(newRatio * float64(pods)))
	if (newRatio < 1.0 && proposal > currentReplicas) || (newRatio > 1.0 && proposal < currentReplicas) {
		return currentReplicas
	}
	return proposal
}

// GetRawResourceReplicas proposes replicas for a resource at targetUsage milli-units
// per pod.
func (c *ReplicaCalculator) GetRawResourceReplicas(ctx context.Context, currentReplicas int32, targetUsage int64, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (int32, int64, time.Time, error) {
	metrics, timestamp, err := c.Metrics.GetResourceMetric(ctx, resource, namespace, selector, container)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metrics for resource %s: %v", resource, err)
	}
	replicas, usage, err := c.plainMetricReplicas(metrics, currentReplicas, targetUsage, namespace, selector, resource)
	return replicas, usage, timestamp, err
}

// GetMetricReplicas proposes replicas for a custom pods metric at targetUsage
// milli-units per pod.
func (c *ReplicaCalculator) GetMetricReplicas(ctx context.Context, currentReplicas int32, targetUsage int64, metricName, namespace string, selector, metricSelector labels.Selector) (int32, int64, time.Time, error) {
	metrics, timestamp, err := c.Metrics.GetRawMetric(ctx, metricName, namespace, selector, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s: %v", metricName, err)
	}
	replicas, usage, err := c.plainMetricReplicas(metrics, currentReplicas, targetUsage, namespace, selector, "")
	return replicas, usage, timestamp, err
}

// plainMetricReplicas is GetResourceReplicas for a per-pod value target: a pod without
// a sample counts as the target on a scale-down.
func (c *ReplicaCalculator) plainMetricReplicas(metrics PodMetricsInfo, currentReplicas int32, targetUsage int64, namespace string, selector labels.Selector, resource corev1.ResourceName) (int32, int64, error) {
	pods, err := c.Pods.Pods(namespace).List(selector)
	if err != nil {
		return 0, 0, fmt.Errorf("unable to get pods while calculating replica count: %v", err)
	}
	if len(pods) == 0 {
		return 0, 0, fmt.Errorf("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := c.groupPods(pods, metrics, resource)
	removeMetrics(metrics, ignored)
	removeMetrics(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, fmt.Errorf("did not receive metrics for targeted pods (pods might be unready)")
	}
	ratio, usage := usageRatio(metrics, targetUsage)
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if math.Abs(1.0-ratio) <= c.Tolerance {
			return currentReplicas, usage, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), usage, nil
	}
	if len(missing) > 0 {
		switch {
		case ratio < 1.0:
			for name := range missing {
				metrics[name] = PodMetric{Value: targetUsage}
			}
		case ratio > 1.0:
			for name := range missing {
				metrics[name] = PodMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = PodMetric{Value: 0}
		}
	}
	newRatio, _ := usageRatio(metrics, targetUsage)
	return c.settle(currentReplicas, ratio, newRatio, len(metrics)), usage, nil
}

// GetObjectMetricReplicas proposes replicas for an object's metric at targetUsage.
func (c *ReplicaCalculator) GetObjectMetricReplicas(ctx context.Context, currentReplicas int32, targetUsage int64, metricName, namespace string, ref *autoscalingv2.CrossVersionObjectReference, selector, metricSelector labels.Selector) (int32, int64, time.Time, error) {
	usage, _, err := c.Metrics.GetObjectMetric(ctx, metricName, namespace, ref, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s: %v on %s %s/%s", metricName, ref.Kind, namespace, ref.Name, err)
	}
	replicas, timestamp, err := c.usageRatioReplicas(currentReplicas, float64(usage)/float64(targetUsage), namespace, selector)
	return replicas, usage, timestamp, err
}

// usageRatioReplicas is ratio × the ready pods (the current count within tolerance);
// from zero replicas, ratio rounded up.
func (c *ReplicaCalculator) usageRatioReplicas(currentReplicas int32, ratio float64, namespace string, selector labels.Selector) (int32, time.Time, error) {
	if currentReplicas == 0 {
		return int32(math.Ceil(ratio)), time.Time{}, nil
	}
	if math.Abs(1.0-ratio) <= c.Tolerance {
		return currentReplicas, time.Time{}, nil
	}
	ready, err := c.readyPods(namespace, selector)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("unable to calculate ready pods: %s", err)
	}
	return int32(math.Ceil(ratio * float64(ready))), time.Time{}, nil
}

// GetObjectPerPodMetricReplicas proposes replicas for an object's metric at
// targetAverageUsage per replica.
func (c *ReplicaCalculator) GetObjectPerPodMetricReplicas(ctx context.Context, statusReplicas int32, targetAverageUsage int64, metricName, namespace string, ref *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int32, int64, time.Time, error) {
	usage, timestamp, err := c.Metrics.GetObjectMetric(ctx, metricName, namespace, ref, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s: %v on %s %s/%s", metricName, ref.Kind, namespace, ref.Name, err)
	}
	replicas, average := c.perPodReplicas(statusReplicas, usage, targetAverageUsage)
	return replicas, average, timestamp, nil
}

// perPodReplicas is total / target per pod, rounded up, unless within tolerance of the
// status replicas; and the average per replica.
func (c *ReplicaCalculator) perPodReplicas(statusReplicas int32, total, targetPerPod int64) (int32, int64) {
	replicas := statusReplicas
	if math.Abs(1.0-float64(total)/(float64(targetPerPod)*float64(replicas))) > c.Tolerance {
		replicas = int32(math.Ceil(float64(total) / float64(targetPerPod)))
	}
	return replicas, int64(math.Ceil(float64(total) / float64(statusReplicas)))
}

func (c *ReplicaCalculator) readyPods(namespace string, selector labels.Selector) (int64, error) {
	pods, err := c.Pods.Pods(namespace).List(selector)
	if err != nil {
		return 0, fmt.Errorf("unable to get pods while calculating replica count: %v", err)
	}
	if len(pods) == 0 {
		return 0, fmt.Errorf("no pods returned by selector while calculating replica count")
	}
	var ready int64
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodRunning && podReady(pod) {
			ready++
		}
	}
	return ready, nil
}

// GetExternalMetricReplicas proposes replicas for an external metric's total at
// targetUsage.
func (c *ReplicaCalculator) GetExternalMetricReplicas(ctx context.Context, currentReplicas int32, targetUsage int64, metricName, namespace string, metricSelector *metav1.LabelSelector, podSelector labels.Selector) (int32, int64, time.Time, error) {
	sel, err := metav1.LabelSelectorAsSelector(metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	values, _, err := c.Metrics.GetExternalMetric(ctx, metricName, namespace, sel)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get external metric %s/%s/%+v: %s", namespace, metricName, metricSelector, err)
	}
	var usage int64
	for _, v := range values {
		usage += v
	}
	replicas, timestamp, err := c.usageRatioReplicas(currentReplicas, float64(usage)/float64(targetUsage), namespace, podSelector)
	return replicas, usage, timestamp, err
}

// GetExternalPerPodMetricReplicas proposes replicas for an external metric's total at
// targetUsagePerPod per replica.
func (c *ReplicaCalculator) GetExternalPerPodMetricReplicas(ctx context.Context, statusReplicas int32, targetUsagePerPod int64, metricName, namespace string, metricSelector *metav1.LabelSelector) (int32, int64, time.Time, error) {
	sel, err := metav1.LabelSelectorAsSelector(metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	values, timestamp, err := c.Metrics.GetExternalMetric(ctx, metricName, namespace, sel)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get external metric %s/%s/%+v: %s", namespace, metricName, metricSelector, err)
	}
	var usage int64
	for _, v := range values {
		usage += v
	}
	replicas, average := c.perPodReplicas(statusReplicas, usage, targetUsagePerPod)
	return replicas, average, timestamp, nil
}

// groupPods sorts pods into the ready count and the unready, missing (no sample) and
// ignored (deleted, Failed) names. Mirrors groupPods.
func (c *ReplicaCalculator) groupPods(pods []*corev1.Pod, metrics PodMetricsInfo, resource corev1.ResourceName) (ready int, unready, missing, ignored sets.Set[string]) {
	unready, missing, ignored = sets.New[string](), sets.New[string](), sets.New[string]()
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			ignored.Insert(pod.Name)
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			unready.Insert(pod.Name)
			continue
		}
		metric, found := metrics[pod.Name]
		if !found {
			missing.Insert(pod.Name)
			continue
		}
		if resource == corev1.ResourceCPU && c.cpuUnready(pod, metric) {
			unready.Insert(pod.Name)
			continue
		}
		ready++
	}
	return ready, unready, missing, ignored
}

// cpuUnready reports whether a pod's cpu sample is left out: no Ready condition or
// start time; within the CPU initialization period, not ready or sampled before a
// whole window since it turned ready; after it, not ready and never ready since start.
func (c *ReplicaCalculator) cpuUnready(pod *corev1.Pod, metric PodMetric) bool {
	cond := readyCondition(pod)
	if cond == nil || pod.Status.StartTime == nil {
		return true
	}
	if pod.Status.StartTime.Add(c.CPUInitializationPeriod).After(time.Now()) {
		return cond.Status == corev1.ConditionFalse || metric.Timestamp.Before(cond.LastTransitionTime.Add(metric.Window))
	}
	return cond.Status == corev1.ConditionFalse && pod.Status.StartTime.Add(c.DelayOfInitialReadinessStatus).After(cond.LastTransitionTime.Time)
}

func readyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	c := readyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// podRequests sums each pod's request of resource over its containers (and restartable
// init containers), or container's alone. Errors: a container without that request.
func podRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	requests := make(map[string]int64, len(pods))
	for _, pod := range pods {
		containers := append([]corev1.Container{}, pod.Spec.Containers...)
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				containers = append(containers, c)
			}
		}
		var sum int64
		for _, c := range containers {
			if container != "" && container != c.Name {
				continue
			}
			req, ok := c.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, c.Name, pod.Name)
			}
			sum += req.MilliValue()
		}
		requests[pod.Name] = sum
	}
	return requests, nil
}

// utilizationRatio is the pods' usage over their requests, as a whole percentage, over
// target; with that percentage and the average usage. Mirrors GetResourceUtilizationRatio.
func utilizationRatio(metrics PodMetricsInfo, requests map[string]int64, target int32) (float64, int32, int64, error) {
	var usage, requested int64
	n := 0
	for name, m := range metrics {
		req, ok := requests[name]
		if !ok {
			continue
		}
		usage += m.Value
		requested += req
		n++
	}
	if requested == 0 {
		return 0, 0, 0, fmt.Errorf("no metrics returned matched known pods")
	}
	current := int32(usage * 100 / requested)
	return float64(current) / float64(target), current, usage / int64(n), nil
}

// usageRatio is the average sample over target, with the average. Mirrors
// GetMetricUsageRatio.
func usageRatio(metrics PodMetricsInfo, target int64) (float64, int64) {
	var total int64
	for _, m := range metrics {
		total += m.Value
	}
	average := total / int64(len(metrics))
	return float64(average) / float64(target), average
}

func removeMetrics(metrics PodMetricsInfo, pods sets.Set[string]) {
	for name := range pods {
		delete(metrics, name)
	}
}
