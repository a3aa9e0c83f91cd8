package podautoscaler

import (
	"context"
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	custommetricsv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	resourceclient "k8s.io/metrics/pkg/client/clientset/versioned/typed/metrics/v1beta1"
	customclient "k8s.io/metrics/pkg/client/custom_metrics"
	externalclient "k8s.io/metrics/pkg/client/external_metrics"
)

// PodMetric is one pod's sample of a metric: its value in milli-units, when it was
// taken and over how long a window.
type PodMetric struct {
	Timestamp time.Time
	Window    time.Duration
	Value     int64
}

// PodMetricsInfo is a sample per pod name.
type PodMetricsInfo map[string]PodMetric

// MetricsClient fetches what an autoscaler's metrics name. Mirrors kube's
// podautoscaler/metrics.MetricsClient.
type MetricsClient interface {
	// GetResourceMetric returns resource's usage by each pod selector picks in
	// namespace (container's alone when container is set, else the sum of the pod's
	// containers), and the first sample's time.
	GetResourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (PodMetricsInfo, time.Time, error)
	// GetRawMetric returns the custom metric metricName of each pod selector picks.
	GetRawMetric(ctx context.Context, metricName, namespace string, selector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error)
	// GetObjectMetric returns the custom metric metricName of one object.
	GetObjectMetric(ctx context.Context, metricName, namespace string, ref *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error)
	// GetExternalMetric returns every value of the external metric metricName that
	// selector picks.
	GetExternalMetric(ctx context.Context, metricName, namespace string, selector labels.Selector) ([]int64, time.Time, error)
}

// defaultMetricWindow is the window of a custom metric sample that names none.
const defaultMetricWindow = time.Minute

// RESTMetricsClient reads the resource metrics API (metrics.k8s.io/v1beta1,
// metrics-server's), the custom metrics API (custom.metrics.k8s.io) and the external
// metrics API (external.metrics.k8s.io) through the apiserver, which proxies them to
// the extension servers their APIServices name. Without such a server each read fails
// with the apiserver's answer ("the server could not find the requested resource"), as
// kube's controller's do. Mirrors kube's restMetricsClient.
type RESTMetricsClient struct {
	Resource resourceclient.PodMetricsesGetter
	Custom   customclient.CustomMetricsClient
	External externalclient.ExternalMetricsClient
}

var _ MetricsClient = RESTMetricsClient{}

// GetResourceMetric lists the PodMetrics selector picks. A pod missing resource in any
// container (or with no containers) has no sample. Errors: the API's, or none listed.
func (c RESTMetricsClient) GetResourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (PodMetricsInfo, time.Time, error) {
	list, err := c.Resource.PodMetricses(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("unable to fetch metrics from resource metrics API: %v", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from resource metrics API")
	}
	var res PodMetricsInfo
	if container != "" {
		if res, err = containerMetrics(list.Items, resource, container); err != nil {
			return nil, time.Time{}, fmt.Errorf("failed to get container metrics: %v", err)
		}
	} else {
		res = podMetrics(list.Items, resource)
	}
	return res, list.Items[0].Timestamp.Time, nil
}

func containerMetrics(items []metricsv1beta1.PodMetrics, resource corev1.ResourceName, container string) (PodMetricsInfo, error) {
	res := make(PodMetricsInfo, len(items))
	for _, m := range items {
		found := false
		for _, c := range m.Containers {
			if c.Name != container {
				continue
			}
			found = true
			if v, ok := c.Usage[resource]; ok {
				res[m.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: v.MilliValue()}
			}
			break
		}
		if !found {
			return nil, fmt.Errorf("container %s not present in metrics for pod %s/%s", container, m.Namespace, m.Name)
		}
	}
	return res, nil
}

func podMetrics(items []metricsv1beta1.PodMetrics, resource corev1.ResourceName) PodMetricsInfo {
	res := make(PodMetricsInfo, len(items))
	for _, m := range items {
		if len(m.Containers) == 0 {
			continue
		}
		var sum int64
		complete := true
		for _, c := range m.Containers {
			v, ok := c.Usage[resource]
			if !ok {
				complete = false
				break
			}
			sum += v.MilliValue()
		}
		if complete {
			res[m.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: sum}
		}
	}
	return res
}

// GetRawMetric reads metricName of the pods selector picks from the custom metrics API.
func (c RESTMetricsClient) GetRawMetric(_ context.Context, metricName, namespace string, selector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error) {
	list, err := c.Custom.NamespacedMetrics(namespace).GetForObjects(schema.GroupKind{Kind: "Pod"}, selector, metricName, metricSelector)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("unable to fetch metrics from custom metrics API: %v", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from custom metrics API")
	}
	res := make(PodMetricsInfo, len(list.Items))
	for _, m := range list.Items {
		window := defaultMetricWindow
		if m.WindowSeconds != nil {
			window = time.Duration(*m.WindowSeconds) * time.Second
		}
		res[m.DescribedObject.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: window, Value: m.Value.MilliValue()}
	}
	return res, list.Items[0].Timestamp.Time, nil
}

// GetObjectMetric reads metricName of one object from the custom metrics API (a
// Namespace is the autoscaler's own, root-scoped).
func (c RESTMetricsClient) GetObjectMetric(_ context.Context, metricName, namespace string, ref *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	var (
		v   *custommetricsv1beta2.MetricValue
		err error
	)
	if gvk.Kind == "Namespace" && gvk.Group == "" {
		v, err = c.Custom.RootScopedMetrics().GetForObject(gvk.GroupKind(), namespace, metricName, metricSelector)
	} else {
		v, err = c.Custom.NamespacedMetrics(namespace).GetForObject(gvk.GroupKind(), ref.Name, metricName, metricSelector)
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("unable to fetch metrics from custom metrics API: %v", err)
	}
	return v.Value.MilliValue(), v.Timestamp.Time, nil
}

// GetExternalMetric lists metricName's values from the external metrics API.
func (c RESTMetricsClient) GetExternalMetric(_ context.Context, metricName, namespace string, selector labels.Selector) ([]int64, time.Time, error) {
	list, err := c.External.NamespacedMetrics(namespace).List(metricName, selector)
	if err != nil {
		return []int64{}, time.Time{}, fmt.Errorf("unable to fetch metrics from external metrics API: %v", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from external metrics API")
	}
	res := make([]int64, 0, len(list.Items))
	for _, m := range list.Items {
		res = append(res, m.Value.MilliValue())
	}
	return res, list.Items[0].Timestamp.Time, nil
}
