package podautoscaler_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/internal/pki"
)

// standInMetricsServer serves metrics.k8s.io/v1beta1 as metrics-server does, over TLS
// behind an APIService, so the controller reads it through the apiserver's aggregator
// exactly as it would read metrics-server: every pod of the list has one container
// using cpuMilli millicores.
type standInMetricsServer struct {
	*httptest.Server
	caPEM    []byte
	cpuMilli atomic.Int64
}

func (m *standInMetricsServer) serve(w http.ResponseWriter, r *http.Request) {
	const gv = "/apis/metrics.k8s.io/v1beta1"
	write := func(v interface{}) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.URL.Path == gv:
		write(&metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "metrics.k8s.io/v1beta1",
			APIResources: []metav1.APIResource{{Name: "pods", SingularName: "", Namespaced: true, Kind: "PodMetrics", Verbs: metav1.Verbs{"get", "list"}}}})
	case strings.HasPrefix(r.URL.Path, gv+"/namespaces/") && strings.HasSuffix(r.URL.Path, "/pods"):
		list := metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
		for _, name := range []string{"web-1", "web-2"} {
			list.Items = append(list.Items, metricsv1beta1.PodMetrics{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Timestamp:  metav1.Now(), Window: metav1.Duration{Duration: 15 * time.Second},
				Containers: []metricsv1beta1.ContainerMetrics{{Name: "c", Usage: corev1.ResourceList{
					corev1.ResourceCPU: *resource.NewMilliQuantity(m.cpuMilli.Load(), resource.DecimalSI)}}},
			})
		}
		write(&list)
	default:
		http.NotFound(w, r)
	}
}

// registerStandInMetricsServer starts the server and registers it as
// v1beta1.metrics.k8s.io (a Service in kube-system, its EndpointSlice to the server's
// loopback port), waiting until the APIService is Available.
func registerStandInMetricsServer(t *testing.T, cfg *rest.Config) *standInMetricsServer {
	t.Helper()
	ctx := context.Background()
	ca, err := pki.NewCA("metrics-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServing("metrics-server", []string{"metrics-server.kube-system.svc"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	m := &standInMetricsServer{caPEM: ca.CertPEM}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	m.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	m.StartTLS()
	t.Cleanup(m.Close)

	cs := kubernetes.NewForConfigOrDie(cfg)
	port := int32(m.Listener.Addr().(*net.TCPAddr).Port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	if _, err := cs.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "metrics-server-1", Labels: map[string]string{discoveryv1.LabelServiceName: "metrics-server"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: &port, Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ac := aggregatorclient.NewForConfigOrDie(cfg)
	apiService := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}, CABundle: m.caPEM}}
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "v1beta1.metrics.k8s.io Available", func(ctx context.Context) error {
		s, err := ac.ApiregistrationV1().APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range s.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", s.Status.Conditions)
	})
	return m
}

// runningPod creates a Ready, Running pod of the web Deployment's labels requesting
// 100m cpu, started long enough ago that its cpu samples count.
func runningPod(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-1", AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	long := metav1.NewTime(time.Now().Add(-time.Hour))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &long,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: long}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestScalesOnCPUFromTheResourceMetricsAPI covers the resource metrics path once a
// metrics API is registered and available: two pods at 150 % of their cpu request
// against a 50 % target ask for 6 replicas; without a behavior the first step is
// limited to max(2 × 2, 4) = 4 (ScalingLimited ScaleUpLimit), the next reaches 6; the
// status carries the cpu metric (150 %, 150m) and ScalingActive ValidMetricFound. At
// 10 % the autoscaler scales back down to minReplicas once the (here 1 s) downscale
// stabilization window lets it.
func TestScalesOnCPUFromTheResourceMetricsAPI(t *testing.T) {
	cs, cfg := startWith(t, time.Second)
	ctx := context.Background()
	m := registerStandInMetricsServer(t, cfg)
	m.cpuMilli.Store(150)
	runningPod(t, cs, "web-1")
	runningPod(t, cs, "web-2")
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := hpa("web", 1, 10)
	h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}}
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const reason = "cpu resource utilization (percentage of request) above target"
	event(t, cs, "web", "SuccessfulRescale", "New size: 4; reason: "+reason)
	event(t, cs, "web", "SuccessfulRescale", "New size: 6; reason: "+reason)
	until(t, "settled at 6", func(ctx context.Context) error {
		got, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := got.Status
		active, limited := condition(got, autoscalingv2.ScalingActive), condition(got, autoscalingv2.ScalingLimited)
		if st.CurrentReplicas != 6 || st.DesiredReplicas != 6 || len(st.CurrentMetrics) != 1 || st.CurrentMetrics[0].Resource == nil ||
			*st.CurrentMetrics[0].Resource.Current.AverageUtilization != 150 || st.CurrentMetrics[0].Resource.Current.AverageValue.String() != "150m" {
			return fmt.Errorf("status %+v", st)
		}
		if active == nil || active.Status != corev1.ConditionTrue || active.Reason != "ValidMetricFound" ||
			active.Message != "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)" {
			return fmt.Errorf("ScalingActive %+v", active)
		}
		if limited == nil || limited.Status != corev1.ConditionFalse || limited.Reason != "DesiredWithinRange" {
			return fmt.Errorf("ScalingLimited %+v", limited)
		}
		return nil
	})

	m.cpuMilli.Store(10)
	event(t, cs, "web", "SuccessfulRescale", "New size: 1; reason: All metrics below target")
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("deployment replicas %d after the scale-down, want minReplicas 1", *d.Spec.Replicas)
	}
}
