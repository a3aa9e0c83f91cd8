package service_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
)

func newClient(t *testing.T) (kubernetes.Interface, *controlplanetest.Server) {
	t.Helper()
	srv := controlplanetest.StartServer(t, func(cfg *apiserver.Config) {
		cfg.AdvertiseAddress = net.ParseIP("192.0.2.10")
	})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs, srv
}

func clusterIPService(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
	}
}

func TestServices(t *testing.T) {
	cs, srv := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svcs := cs.CoreV1().Services("default")

	t.Run("the kubernetes Service with its endpoints", func(t *testing.T) {
		var svc *corev1.Service
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			svc, err = svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("no kubernetes Service: %v", err)
		}
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
		if svc.Spec.ClusterIP != "10.96.0.1" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != port {
			t.Fatalf("kubernetes Service: %+v", svc.Spec)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			slice, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return slice.Endpoints[0].Addresses[0] == "192.0.2.10" && ep.Subsets[0].Addresses[0].IP == "192.0.2.10" &&
				ep.Subsets[0].Ports[0].Port == svc.Spec.Ports[0].TargetPort.IntVal, nil
		})
		if err != nil {
			t.Fatalf("kubernetes Endpoints and EndpointSlice: %v", err)
		}
	})

	t.Run("defaults", func(t *testing.T) {
		in := clusterIPService("defaults", "")
		in.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		in.Spec.Ports[0].TargetPort = intstr.IntOrString{}
		svc, err := svcs.Create(ctx, in, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP ||
			svc.Spec.Ports[0].TargetPort != intstr.FromInt32(80) ||
			*svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 10800 ||
			len(svc.Spec.IPFamilies) != 1 || svc.Spec.IPFamilies[0] != corev1.IPv4Protocol ||
			*svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack ||
			*svc.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyCluster {
			t.Fatalf("defaults not filled: %+v", svc.Spec)
		}
		if ip := net.ParseIP(svc.Spec.ClusterIP); ip == nil || !strings.HasPrefix(svc.Spec.ClusterIP, "10.") || svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
			t.Fatalf("clusterIP %q clusterIPs %v", svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
	})

	t.Run("a patch built from an empty Service (creationTimestamp: null) changes only what it sets", func(t *testing.T) {
		created, err := svcs.Create(ctx, clusterIPService("patched", ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What the conformance suite's service status lifecycle test sends: json.Marshal of a
		// Service holding only labels.
		patch := []byte(`{"metadata":{"labels":{"test-service":"patched"},"creationTimestamp":null},"spec":{},"status":{"loadBalancer":{}}}`)
		svc, err := svcs.Patch(ctx, "patched", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Labels["test-service"] != "patched" || !svc.CreationTimestamp.Equal(&created.CreationTimestamp) || svc.Spec.ClusterIP != created.Spec.ClusterIP {
			t.Fatalf("patched Service: labels %v, creationTimestamp %v (was %v), clusterIP %s (was %s)",
				svc.Labels, svc.CreationTimestamp, created.CreationTimestamp, svc.Spec.ClusterIP, created.Spec.ClusterIP)
		}
	})

	t.Run("a NodePort Service becomes ExternalName: its IPs, node ports and traffic policy go", func(t *testing.T) {
		in := clusterIPService("to-external", "")
		in.Spec.Type = corev1.ServiceTypeNodePort
		svc, err := svcs.Create(ctx, in, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := svc.Spec.ClusterIP
		// What the conformance suite sends: the object read back, with only the type and
		// externalName changed.
		svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, "foo.example.com"
		out, err := svcs.Update(ctx, svc, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Spec.ClusterIP != "" || len(out.Spec.ClusterIPs) != 0 || out.Spec.Ports[0].NodePort != 0 || out.Spec.ExternalTrafficPolicy != "" || len(out.Spec.IPFamilies) != 0 {
			t.Fatalf("ExternalName Service keeps %+v", out.Spec)
		}
		if _, err := svcs.Create(ctx, clusterIPService("reuses-ip", ip), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the IP the Service gave up: %v", err)
		}
	})

	t.Run("a requested IP in use is refused with kube's message, and freed on delete", func(t *testing.T) {
		if _, err := svcs.Create(ctx, clusterIPService("first", "10.96.0.10"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := svcs.Create(ctx, clusterIPService("second", "10.96.0.10"), metav1.CreateOptions{})
		// apimachinery ≥ 0.31 prints a slice value as JSON; older kube printed []string{"10.96.0.10"}.
		want := `Service "second" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`
		if !apierrors.IsInvalid(err) || err.Error() != want {
			t.Fatalf("want 422 %q, got %v", want, err)
		}
		if err := svcs.Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := svcs.Create(ctx, clusterIPService("second", "10.96.0.10"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the IP of a deleted Service: %v", err)
		}
	})

	t.Run("a requested IP out of range", func(t *testing.T) {
		_, err := svcs.Create(ctx, clusterIPService("outside", "10.200.0.1"), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "failed to allocate IP 10.200.0.1: the provided IP (10.200.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("the allocations survive an apiserver restart", func(t *testing.T) {
		srv.RestartAPIServer()
		_, err := svcs.Create(ctx, clusterIPService("third", "10.96.0.10"), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want 422, got %v", err)
		}
	})

	t.Run("node ports: allocated, requested, in use, kept on update, released on a type change", func(t *testing.T) {
		np := clusterIPService("np", "")
		np.Spec.Type = corev1.ServiceTypeNodePort
		np.Spec.Ports = append(np.Spec.Ports, corev1.ServicePort{Name: "fixed", Port: 81, NodePort: 30081})
		np.Spec.Ports[0].Name = "http"
		svc, err := svcs.Create(ctx, np, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dynamic := svc.Spec.Ports[0].NodePort
		if dynamic < 30000 || dynamic > 32767 || svc.Spec.Ports[1].NodePort != 30081 || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster {
			t.Fatalf("node ports %+v", svc.Spec)
		}
		other := clusterIPService("np2", "")
		other.Spec.Type = corev1.ServiceTypeNodePort
		other.Spec.Ports[0].NodePort = 30081
		_, err = svcs.Create(ctx, other, metav1.CreateOptions{})
		if want := `Service "np2" is invalid: spec.ports[0].nodePort: Invalid value: 30081: provided port is already allocated`; err == nil || err.Error() != want {
			t.Fatalf("want %q, got %v", want, err)
		}
		// An update that leaves nodePort out keeps it (kubectl apply of the original manifest).
		svc.Spec.Ports[0].NodePort = 0
		svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
		if err != nil || svc.Spec.Ports[0].NodePort != dynamic {
			t.Fatalf("update: %v %+v", err, svc)
		}
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.ExternalTrafficPolicy = ""
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := svcs.Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatalf("30081 after the type change released it: %v", err)
		}
	})

	t.Run("generateName", func(t *testing.T) {
		in := clusterIPService("", "")
		in.GenerateName = "gen-"
		svc, err := svcs.Create(ctx, in, metav1.CreateOptions{})
		if err != nil || !strings.HasPrefix(svc.Name, "gen-") || svc.Spec.ClusterIP == "" {
			t.Fatalf("generateName: %v %+v", err, svc)
		}
	})

	t.Run("LoadBalancer without a cloud: node ports and a pending address", func(t *testing.T) {
		lb := clusterIPService("lb", "")
		lb.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc, err := svcs.Create(ctx, lb, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Ports[0].NodePort == 0 || svc.Spec.ClusterIP == "" || !*svc.Spec.AllocateLoadBalancerNodePorts {
			t.Fatalf("LoadBalancer: %+v", svc.Spec)
		}
	})

	t.Run("headless", func(t *testing.T) {
		svc, err := svcs.Create(ctx, clusterIPService("headless", "None"), metav1.CreateOptions{})
		if err != nil || svc.Spec.ClusterIP != "None" || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
			t.Fatalf("headless: %v %+v", err, svc)
		}
		selectorless := clusterIPService("headless-selectorless", "None")
		selectorless.Spec.Selector = nil
		svc, err = svcs.Create(ctx, selectorless, metav1.CreateOptions{})
		if err != nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyRequireDualStack {
			t.Fatalf("headless selectorless: %v %+v", err, svc)
		}
	})

	t.Run("the clusterIP may not change", func(t *testing.T) {
		svc, err := svcs.Get(ctx, "defaults", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.96.0.11", []string{"10.96.0.11"}
		if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not change once set") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("a dry run allocates nothing", func(t *testing.T) {
		if _, err := svcs.Create(ctx, clusterIPService("dry", "10.96.0.12"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		if _, err := svcs.Create(ctx, clusterIPService("wet", "10.96.0.12"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the IP a dry run checked is still free: %v", err)
		}
	})

	t.Run("deleting a namespace releases its services' IPs", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Services("gone").Create(ctx, clusterIPService("doomed", "10.96.0.20"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Namespaces().Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := svcs.Create(ctx, clusterIPService("reborn", "10.96.0.20"), metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("10.96.0.20 never came free: %v", err)
		}
	})

	t.Run("status updates keep the spec", func(t *testing.T) {
		svc, err := svcs.Get(ctx, "lb", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		svc.Spec.Selector = map[string]string{"changed": "true"}
		out, err := svcs.UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		if err != nil || out.Status.LoadBalancer.Ingress[0].IP != "203.0.113.7" || out.Spec.Selector["app"] != "lb" {
			t.Fatalf("status: %v %+v", err, out)
		}
	})
}
