package endpointslicemirroring

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "endpoint-slice-mirroring-controller"})
	factory := informers.NewSharedInformerFactory(controllerClient, 0)
	c := NewController(factory.Core().V1().Endpoints(), factory.Discovery().V1().EndpointSlices(), factory.Core().V1().Services(), controllerClient, recorder)
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

func listSlices(ctx context.Context, t *testing.T, cs kubernetes.Interface, service string) []discoveryv1.EndpointSlice {
	t.Helper()
	list, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitSlices waits until the service's slices satisfy ok.
func waitSlices(ctx context.Context, t *testing.T, cs kubernetes.Interface, service, what string, ok func([]discoveryv1.EndpointSlice) bool) []discoveryv1.EndpointSlice {
	t.Helper()
	var got []discoveryv1.EndpointSlice
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got = listSlices(ctx, t, cs, service)
		return ok(got), nil
	})
	if err != nil {
		t.Fatalf("%s: %v; slices %+v", what, err, got)
	}
	return got
}

// noSlices checks the service has no slices for a second.
func noSlices(ctx context.Context, t *testing.T, cs kubernetes.Interface, service string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got := listSlices(ctx, t, cs, service); len(got) != 0 {
			t.Fatalf("slices mirrored for %s: %+v", service, got)
		}
	}
}

func createService(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, selector map[string]string) *corev1.Service {
	t.Helper()
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "example", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func createEndpoints(ctx context.Context, t *testing.T, cs kubernetes.Interface, ep *corev1.Endpoints) *corev1.Endpoints {
	t.Helper()
	out, err := cs.CoreV1().Endpoints("default").Create(ctx, ep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func simpleEndpoints(name, ip string) *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subsets: []corev1.EndpointSubset{{
			Ports:     []corev1.EndpointPort{{Port: 80}},
			Addresses: []corev1.EndpointAddress{{IP: ip}},
		}},
	}
}

// addresses maps each mirrored address to its Ready condition.
func addresses(slices []discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			out[ep.Addresses[0]] = ep.Conditions.Ready != nil && *ep.Conditions.Ready
		}
	}
	return out
}

// TestMirroring walks the conformance test's create, update and delete of a custom
// Endpoints resource, and the cases where nothing may be mirrored.
func TestMirroring(t *testing.T) {
	ctx, cs := startController(t)
	createService(ctx, t, cs, "custom", nil)
	ep := simpleEndpoints("custom", "10.1.2.3")
	ep.Labels = map[string]string{"team": "a"}
	ep.Annotations = map[string]string{"note": "kept", corev1.EndpointsLastChangeTriggerTime: "2025-01-01T00:00:00Z"}
	ep.Subsets[0].Addresses[0].NodeName = ptr.To("node-1")
	ep.Subsets[0].Addresses[0].Hostname = "host-a"
	ep = createEndpoints(ctx, t, cs, ep)

	var first discoveryv1.EndpointSlice
	t.Run("a selectorless Service's Endpoints get one slice mirroring them", func(t *testing.T) {
		slices := waitSlices(ctx, t, cs, "custom", "one slice", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		first = slices[0]
		s := first
		if len(s.Ports) != 1 || *s.Ports[0].Port != 80 || *s.Ports[0].Protocol != corev1.ProtocolTCP || *s.Ports[0].Name != "" {
			t.Errorf("ports %+v", s.Ports)
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Endpoints) != 1 {
			t.Fatalf("slice %+v", s)
		}
		e := s.Endpoints[0]
		if e.Addresses[0] != "10.1.2.3" || !*e.Conditions.Ready || ptr.Deref(e.NodeName, "") != "node-1" || ptr.Deref(e.Hostname, "") != "host-a" {
			t.Errorf("endpoint %+v", e)
		}
		if s.Labels[discoveryv1.LabelManagedBy] != ControllerName || s.Labels[discoveryv1.LabelServiceName] != "custom" || s.Labels["team"] != "a" {
			t.Errorf("labels %v", s.Labels)
		}
		if s.Annotations["note"] != "kept" || s.Annotations[corev1.EndpointsLastChangeTriggerTime] != "" {
			t.Errorf("annotations %v", s.Annotations)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Endpoints" || s.OwnerReferences[0].UID != ep.UID || !*s.OwnerReferences[0].Controller {
			t.Errorf("owners %+v", s.OwnerReferences)
		}
		if s.GenerateName != "custom-" {
			t.Errorf("generateName %q", s.GenerateName)
		}
	})

	t.Run("an update is mirrored in place; v6 addresses get their own slice", func(t *testing.T) {
		ep.Subsets[0].Addresses = []corev1.EndpointAddress{{IP: "10.2.3.4"}}
		ep.Subsets[0].NotReadyAddresses = []corev1.EndpointAddress{{IP: "10.2.3.5"}, {IP: "fd00::5"}}
		var err error
		if ep, err = cs.CoreV1().Endpoints("default").Update(ctx, ep, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		slices := waitSlices(ctx, t, cs, "custom", "updated", func(s []discoveryv1.EndpointSlice) bool {
			a := addresses(s)
			return len(s) == 2 && len(a) == 3 && a["10.2.3.4"] && !a["10.2.3.5"] && !a["fd00::5"]
		})
		for _, s := range slices {
			switch s.AddressType {
			case discoveryv1.AddressTypeIPv4:
				if s.Name != first.Name || len(s.Endpoints) != 2 {
					t.Errorf("v4 slice %s (was %s) with %d endpoints", s.Name, first.Name, len(s.Endpoints))
				}
			case discoveryv1.AddressTypeIPv6:
				if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "fd00::5" {
					t.Errorf("v6 slice %+v", s)
				}
			}
		}
		// Settled slices are not rewritten again and again.
		time.Sleep(time.Second)
		for _, s := range listSlices(ctx, t, cs, "custom") {
			for _, before := range slices {
				if s.Name == before.Name && s.ResourceVersion != before.ResourceVersion {
					t.Errorf("slice %s rewritten with nothing changed", s.Name)
				}
			}
		}
	})

	t.Run("a slice deleted by hand is put back", func(t *testing.T) {
		if err := cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "custom", "restored", func(s []discoveryv1.EndpointSlice) bool {
			return len(s) == 2 && len(addresses(s)) == 3
		})
	})

	t.Run("the Service gaining a selector ends the mirroring, losing it resumes it", func(t *testing.T) {
		svc, err := cs.CoreV1().Services("default").Get(ctx, "custom", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Selector = map[string]string{"app": "web"}
		if svc, err = cs.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "custom", "none with a selector", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 })
		svc.Spec.Selector = nil
		if _, err = cs.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "custom", "back without", func(s []discoveryv1.EndpointSlice) bool { return len(addresses(s)) == 3 })
	})

	t.Run("deleting the Endpoints deletes the slices", func(t *testing.T) {
		if err := cs.CoreV1().Endpoints("default").Delete(ctx, "custom", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "custom", "no slices", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 })
	})

	t.Run("subsets with the same addresses share one slice", func(t *testing.T) {
		createService(ctx, t, cs, "multi", nil)
		createEndpoints(ctx, t, cs, &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "multi"},
			Subsets: []corev1.EndpointSubset{
				{Ports: []corev1.EndpointPort{{Name: "port80", Port: 8090}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}},
				{Ports: []corev1.EndpointPort{{Name: "port81", Port: 9090}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}},
			},
		})
		slices := waitSlices(ctx, t, cs, "multi", "one slice", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		if s := slices[0]; len(s.Ports) != 2 || len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.0.0.9" {
			t.Fatalf("slice %+v", s)
		}
	})

	t.Run("Endpoints labelled skip-mirror are not mirrored", func(t *testing.T) {
		createService(ctx, t, cs, "skipped", nil)
		skipped := simpleEndpoints("skipped", "10.3.0.1")
		skipped.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"}
		skipped = createEndpoints(ctx, t, cs, skipped)
		// A mirrored Endpoints created after it shows the controller has been at work.
		createService(ctx, t, cs, "barrier", nil)
		createEndpoints(ctx, t, cs, simpleEndpoints("barrier", "10.3.0.2"))
		waitSlices(ctx, t, cs, "barrier", "barrier mirrored", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		noSlices(ctx, t, cs, "skipped")

		// Dropping the label mirrors it; setting it again deletes the slices.
		delete(skipped.Labels, discoveryv1.LabelSkipMirror)
		var err error
		if skipped, err = cs.CoreV1().Endpoints("default").Update(ctx, skipped, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "skipped", "mirrored once unlabelled", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		skipped.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"}
		if _, err = cs.CoreV1().Endpoints("default").Update(ctx, skipped, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "skipped", "gone once labelled again", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 })
	})

	t.Run("the Endpoints of a Service with a selector are not mirrored", func(t *testing.T) {
		createService(ctx, t, cs, "selected", map[string]string{"app": "web"})
		createEndpoints(ctx, t, cs, simpleEndpoints("selected", "10.4.0.1"))
		createService(ctx, t, cs, "barrier2", nil)
		createEndpoints(ctx, t, cs, simpleEndpoints("barrier2", "10.4.0.2"))
		waitSlices(ctx, t, cs, "barrier2", "barrier mirrored", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 1 })
		noSlices(ctx, t, cs, "selected")
	})

	t.Run("Endpoints without a Service are not mirrored; deleting the Service deletes the slices", func(t *testing.T) {
		createEndpoints(ctx, t, cs, simpleEndpoints("orphan", "10.5.0.1"))
		if err := cs.CoreV1().Services("default").Delete(ctx, "barrier", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSlices(ctx, t, cs, "barrier", "gone with the Service", func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 })
		noSlices(ctx, t, cs, "orphan")
	})
}
