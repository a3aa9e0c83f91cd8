package service_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestServiceAndPodProxy reaches a backend through services/<name>/proxy (a
// selector-less Service whose Endpoints name a server on loopback), and shows the
// caller's credentials stay with the apiserver; pods/<name>/proxy refuses a pod
// without a routable IP.
func TestServiceAndPodProxy(t *testing.T) {
	cs, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Endpoints and pod IPs may not be loopback: the backend listens on an address of
	// this host's own (traffic to it never leaves the host).
	host := hostAddress(t)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "the caller's credentials reached the backend", http.StatusTeapot)
			return
		}
		io.WriteString(w, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	}))
	backend.Listener = l
	backend.Start()
	defer backend.Close()
	port := l.Addr().(*net.TCPAddr).Port

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(port))}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Endpoints("default").Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: host}}, Ports: []corev1.EndpointPort{{Name: "http", Port: int32(port), Protocol: corev1.ProtocolTCP}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := cs.CoreV1().RESTClient()
	for _, id := range []string{"web:http", "http:web:80", "web:80"} {
		res := rc.Post().Namespace("default").Resource("services").Name(id).SubResource("proxy").Suffix("some/path").Param("q", "1").Do(ctx)
		body, err := res.Raw()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if string(body) != "POST /some/path?q=1" {
			t.Errorf("%s: backend saw %q", id, body)
		}
	}
	_, err = rc.Get().Namespace("default").Resource("services").Name("web:99").SubResource("proxy").DoRaw(ctx)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a port the Service does not have: %v, want 503", err)
	}
	_, err = rc.Get().Namespace("default").Resource("services").Name("ftp:web:http").SubResource("proxy").DoRaw(ctx)
	if !apierrors.IsBadRequest(err) {
		t.Errorf("an unknown scheme: %v, want 400", err)
	}
	_, err = rc.Get().Namespace("default").Resource("services").Name("missing").SubResource("proxy").DoRaw(ctx)
	if !apierrors.IsNotFound(err) {
		t.Errorf("a missing Service: %v, want 404", err)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
		Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}}}}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rc.Get().Namespace("default").Resource("pods").Name("p").SubResource("proxy").DoRaw(ctx)
	if !apierrors.IsBadRequest(err) {
		t.Errorf("a pod without an IP: %v, want 400 address not allowed", err)
	}
	created.Status.PodIP, created.Status.PodIPs = host, []corev1.PodIP{{IP: host}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No port: the first container port.
	for _, id := range []string{"p", "http:p:" + strconv.Itoa(port)} {
		body, err := rc.Delete().Namespace("default").Resource("pods").Name(id).SubResource("proxy").Suffix("x").DoRaw(ctx)
		if err != nil || string(body) != "DELETE /x?" {
			t.Errorf("pod %s: backend saw %q, %v", id, body, err)
		}
	}
}

// hostAddress is a non-loopback IPv4 address of this host, or skips the test.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return ""
}
