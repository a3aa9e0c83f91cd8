package endpointslice

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// startController runs the controller against a real apiserver and returns a client.
func startController(t *testing.T) (context.Context, kubernetes.Interface) {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	srv.Config.QPS = -1
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The controller acts as kube-controller-manager, whose RBAC roles must let it.
	controllerConfig := srv.ClientConfig("system:kube-controller-manager")
	controllerConfig.QPS = -1
	controllerClient, err := kubernetes.NewForConfig(controllerConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: controllerClient.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "endpointslice-controller"})
	factory := informers.NewSharedInformerFactory(controllerClient, 0)
	c := NewController(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices(), controllerClient, recorder)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 2)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
		broadcaster.Shutdown()
	})
	return ctx, cs
}

// newPod creates a pod exposing port as "http" and sets its IP and Ready condition
// through the status subresource, as a kubelet does.
func newPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, ip string, port int32, ready bool) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		// Bound to a node, so a graceful delete leaves the pod terminating.
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return setStatus(ctx, t, cs, pod, ip, ready)
}

func setStatus(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, ip string, ready bool) *corev1.Pod {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	out, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitSlices waits until the service's slices satisfy ok.
func waitSlices(ctx context.Context, t *testing.T, cs kubernetes.Interface, service string, what string, ok func([]discoveryv1.EndpointSlice) bool) []discoveryv1.EndpointSlice {
	t.Helper()
	var got []discoveryv1.EndpointSlice
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, err
		}
		got = list.Items
		return ok(got), nil
	})
	if err != nil {
		t.Fatalf("%s: %v; slices %+v", what, err, got)
	}
	return got
}

// endpointsByPod flattens slices into pod name → (endpoint, its slice's port).
func endpointsByPod(slices []discoveryv1.EndpointSlice) map[string]struct {
	ep   discoveryv1.Endpoint
	port int32
} {
	out := map[string]struct {
		ep   discoveryv1.Endpoint
		port int32
	}{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			var port int32
			if len(s.Ports) > 0 {
				port = *s.Ports[0].Port
			}
			out[ep.TargetRef.Name] = struct {
				ep   discoveryv1.Endpoint
				port int32
			}{ep, port}
		}
	}
	return out
}

func TestEndpointSlices(t *testing.T) {
	ctx, cs := startController(t)
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"tier": "front"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a service without pods has one empty placeholder slice, labelled and owned", func(t *testing.T) {
		slices := waitSlices(ctx, t, cs, "web", "placeholder", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		s := slices[0]
		if len(s.Endpoints) != 0 || s.AddressType != discoveryv1.AddressTypeIPv4 || s.Labels[discoveryv1.LabelManagedBy] != ControllerName ||
			s.Labels["tier"] != "front" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID || !*s.OwnerReferences[0].Controller {
			t.Fatalf("placeholder %+v", s)
		}
	})

	a := newPod(ctx, t, cs, "a", "10.244.0.5", 8080, true)
	b := newPod(ctx, t, cs, "b", "10.244.0.6", 9090, false)

	t.Run("named target ports resolve per pod; conditions follow Ready", func(t *testing.T) {
		waitSlices(ctx, t, cs, "web", "two pods, two port sets", func(s []discoveryv1.EndpointSlice) bool {
			eps := endpointsByPod(s)
			ea, eb := eps["a"], eps["b"]
			return len(s) == 2 && len(eps) == 2 && ea.port == 8080 && eb.port == 9090 &&
				*ea.ep.Conditions.Ready && *ea.ep.Conditions.Serving && !*ea.ep.Conditions.Terminating &&
				!*eb.ep.Conditions.Ready && !*eb.ep.Conditions.Serving && ea.ep.Addresses[0] == "10.244.0.5"
		})
	})

	t.Run("a pod turning Ready turns its endpoint ready", func(t *testing.T) {
		setStatus(ctx, t, cs, b, "10.244.0.6", true)
		waitSlices(ctx, t, cs, "web", "b ready", func(s []discoveryv1.EndpointSlice) bool {
			e := endpointsByPod(s)["b"]
			return e.ep.Conditions.Ready != nil && *e.ep.Conditions.Ready
		})
	})

	t.Run("a terminating pod is serving and terminating, not ready", func(t *testing.T) {
		if err := cs.CoreV1().Pods("default").Delete(ctx, a.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](300)}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "web", "a terminating", func(s []discoveryv1.EndpointSlice) bool {
			e := endpointsByPod(s)["a"]
			return e.ep.Conditions.Terminating != nil && *e.ep.Conditions.Terminating && !*e.ep.Conditions.Ready && *e.ep.Conditions.Serving
		})
		if err := cs.CoreV1().Pods("default").Delete(ctx, a.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "web", "a gone", func(s []discoveryv1.EndpointSlice) bool {
			_, ok := endpointsByPod(s)["a"]
			return !ok && len(s) == 1
		})
	})

	t.Run("at most 100 endpoints per slice", func(t *testing.T) {
		for i := range 120 {
			newPod(ctx, t, cs, fmt.Sprintf("many-%d", i), fmt.Sprintf("10.244.1.%d", i+1), 9090, true)
		}
		slices := waitSlices(ctx, t, cs, "web", "121 endpoints", func(s []discoveryv1.EndpointSlice) bool {
			return len(endpointsByPod(s)) == 121
		})
		sizes := []int{}
		for _, s := range slices {
			sizes = append(sizes, len(s.Endpoints))
			if len(s.Endpoints) > MaxEndpointsPerSlice {
				t.Fatalf("a slice of %d endpoints", len(s.Endpoints))
			}
		}
		sort.Ints(sizes)
		if len(sizes) != 2 || sizes[1] != 100 {
			t.Fatalf("slice sizes %v", sizes)
		}
	})

	t.Run("a slice deleted by hand is put back", func(t *testing.T) {
		slices := waitSlices(ctx, t, cs, "web", "steady", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 2 })
		if err := cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, slices[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "web", "restored", func(s []discoveryv1.EndpointSlice) bool {
			return len(s) == 2 && len(endpointsByPod(s)) == 121
		})
	})

	t.Run("deleting the service deletes its slices", func(t *testing.T) {
		if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "web", "no slices", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 })
	})
}
