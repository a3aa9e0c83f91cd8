package endpoint

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/controlplanetest"
)

func TestEndpoints(t *testing.T) {
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
	factory := informers.NewSharedInformerFactory(controllerClient, 0)
	c := NewController(factory.Core().V1().Pods(), factory.Core().V1().Services(), factory.Core().V1().Endpoints(), controllerClient,
		broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "endpoint-controller"}))
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 2)
	}()
	defer func() {
		cancel()
		<-done
		factory.Shutdown()
		broadcaster.Shutdown()
	}()

	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct {
		name, ip string
		port     int32
	}{{"a", "10.244.0.5", 8080}, {"b", "10.244.0.6", 9090}} {
		pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: p.port}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIP, pod.Status.Phase = p.ip, corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		if pods[p.name], err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func(*corev1.Endpoints) bool) {
		t.Helper()
		var got *corev1.Endpoints
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = cs.CoreV1().Endpoints("default").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && ok(got), nil
		})
		if err != nil {
			t.Fatalf("%s: %v; endpoints %+v", what, err, got)
		}
	}

	// Subsets are ordered by their port set: a's 8080 subset before b's 9090.
	waitFor("not-ready pods under notReadyAddresses, one subset per port", func(ep *corev1.Endpoints) bool {
		return len(ep.Subsets) == 2 && len(ep.Subsets[0].Addresses) == 0 && len(ep.Subsets[0].NotReadyAddresses) == 1 &&
			ep.Subsets[0].Ports[0].Port == 8080 && ep.Subsets[1].Ports[0].Port == 9090 &&
			ep.Subsets[0].NotReadyAddresses[0].IP == "10.244.0.5" && *ep.Subsets[0].NotReadyAddresses[0].NodeName == "node-1"
	})
	a := pods["a"]
	a.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a Ready pod under addresses", func(ep *corev1.Endpoints) bool {
		return len(ep.Subsets) == 2 && len(ep.Subsets[0].Addresses) == 1 && ep.Subsets[0].Addresses[0].TargetRef.Name == "a"
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a terminating pod leaves", func(ep *corev1.Endpoints) bool {
		return len(ep.Subsets) == 1 && ep.Subsets[0].Ports[0].Port == 9090
	})
	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Endpoints("default").Get(ctx, "web", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("endpoints of a deleted service remain: %v", err)
	}
}
