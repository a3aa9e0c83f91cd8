package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"skiff.dev/services/cri/process"
	"skiff.dev/services/cri/socketharness"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/kuberuntime"
	"skiff.dev/services/kubelet/prober/httpget"
	"skiff.dev/services/kubelet/prober/results"
)

// runningContainer runs a pod with one `sleep` container on the process
// runtime and returns a kuberuntime Manager (the exec probes' runner) and the
// container's id; the pod is killed when the test ends.
func runningContainer(t *testing.T) (*kuberuntime.Manager, container.ContainerID) {
	t.Helper()
	ctx := context.Background()
	rt, err := process.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cri := socketharness.Start(t, rt, rt)
	conn, err := kuberuntime.Dial(cri.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := kuberuntime.NewManager(conn, kuberuntime.Options{PodLogsDirectory: t.TempDir()})
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probed", Namespace: "default", UID: "uid-probed"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
			Name: "main", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "1000"},
		}}},
	}
	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if result := m.SyncPod(ctx, pod, status, flowcontrol.NewBackOff(time.Second, time.Second)); result.Error() != nil {
		err := result.Error()
		t.Fatal(err)
	}
	status, err = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil || len(status.ContainerStatuses) != 1 {
		t.Fatalf("pod status: %v %+v", err, status)
	}
	t.Cleanup(func() {
		_ = m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(m.Type(), status), ptr.To[int64](0))
	})
	return m, status.ContainerStatuses[0].ID
}

// probeServers starts the loopback servers the network probes check: an
// HTTP server, a gRPC health server ("" serving, "down" not), and returns
// their ports plus a port nothing listens on.
func probeServers(t *testing.T) (httpPort, grpcPort, closedPort int, otherHost string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fine") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "broken", http.StatusInternalServerError) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/redirect-to-fail", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/fail", http.StatusFound) })
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "yes" || r.UserAgent() != "kube-probe/1.32" || r.URL.Query().Get("q") != "1" {
			http.Error(w, "ua="+r.UserAgent(), http.StatusBadRequest)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// "localhost" is the same server under another host name: a redirect
	// there is not followed.
	mux.HandleFunc("/redirect-away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(port(t, srv.Listener))+"/fail", http.StatusFound)
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort = port(t, closed)
	closed.Close()
	return port(t, srv.Listener), port(t, lis), closedPort, "localhost"
}

func port(t *testing.T, l net.Listener) int {
	t.Helper()
	return l.Addr().(*net.TCPAddr).Port
}

func TestProbeKinds(t *testing.T) {
	runner, id := runningContainer(t)
	httpPort, grpcPort, closedPort, _ := probeServers(t)
	exec := func(cmd ...string) v1.ProbeHandler {
		return v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}
	}
	httpGet := func(path string, port intstr.IntOrString, headers ...v1.HTTPHeader) v1.ProbeHandler {
		return v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: port, HTTPHeaders: headers}}
	}
	tcp := func(port int) v1.ProbeHandler {
		return v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}
	}
	grpcProbe := func(service *string) v1.ProbeHandler {
		return v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(grpcPort), Service: service}}
	}
	for _, tc := range []struct {
		name      string
		handler   v1.ProbeHandler
		timeout   int32
		want      results.Result
		wantEvent string // "" means no event
	}{
		{name: "exec exit 0 succeeds", handler: exec("true"), want: results.Success},
		{name: "exec non-zero exit fails with the output", handler: exec("sh", "-c", "echo not ready; exit 1"), want: results.Failure,
			wantEvent: "Warning Unhealthy Liveness probe failed: not ready"},
		{name: "exec past its timeout fails", handler: exec("sleep", "30"), timeout: 1, want: results.Failure,
			wantEvent: `Warning Unhealthy Liveness probe failed: command "sleep 30" timed out`},
		{name: "httpGet 200 succeeds", handler: httpGet("/ok", intstr.FromInt32(int32(httpPort))), want: results.Success},
		{name: "httpGet by named container port", handler: httpGet("/ok", intstr.FromString("web")), want: results.Success},
		{name: "httpGet 500 fails", handler: httpGet("/fail", intstr.FromInt32(int32(httpPort))), want: results.Failure,
			wantEvent: "Warning Unhealthy Liveness probe failed: HTTP probe failed with statuscode: 500"},
		{name: "httpGet follows a redirect on the same host", handler: httpGet("/redirect-to-fail", intstr.FromInt32(int32(httpPort))), want: results.Failure,
			wantEvent: "statuscode: 500"},
		{name: "httpGet redirect to another host is a warning, not followed", handler: httpGet("/redirect-away", intstr.FromInt32(int32(httpPort))), want: results.Success,
			wantEvent: "Warning ProbeWarning Liveness probe warning: Probe terminated redirects"},
		{name: "httpGet sends headers, query and kube's User-Agent", handler: httpGet("/headers?q=1", intstr.FromInt32(int32(httpPort)), v1.HTTPHeader{Name: "X-Probe", Value: "yes"}),
			want: results.Success},
		{name: "httpGet to a closed port fails", handler: httpGet("/ok", intstr.FromInt32(int32(closedPort))), want: results.Failure,
			wantEvent: "connection refused"},
		{name: "tcpSocket to a listening port succeeds", handler: tcp(httpPort), want: results.Success},
		{name: "tcpSocket to a closed port fails", handler: tcp(closedPort), want: results.Failure, wantEvent: "connection refused"},
		{name: "grpc SERVING succeeds", handler: grpcProbe(nil), want: results.Success},
		{name: "grpc NOT_SERVING fails", handler: grpcProbe(ptr.To("down")), want: results.Failure,
			wantEvent: `service unhealthy (responded with "NOT_SERVING")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			pb := &prober{runner: runner, http: newProbeHTTPClient(), recorder: recorder, userAgent: httpget.UserAgent("kube-probe", "v1.32.4")}
			c := &v1.Container{Name: "main", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(httpPort)}},
				LivenessProbe: &v1.Probe{ProbeHandler: tc.handler, TimeoutSeconds: max(tc.timeout, 1)}}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
			got, err := pb.probe(context.Background(), liveness, pod, v1.PodStatus{PodIP: "127.0.0.1"}, c, id)
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if got != tc.want {
				t.Errorf("result = %v, want %v", got, tc.want)
			}
			var event string
			select {
			case event = <-recorder.Events:
			default:
			}
			if tc.wantEvent == "" && event != "" {
				t.Errorf("unexpected event %q", event)
			}
			if !strings.Contains(event, tc.wantEvent) {
				t.Errorf("event = %q, want it to contain %q", event, tc.wantEvent)
			}
		})
	}
}

func TestProbeErrorsAreNotResults(t *testing.T) {
	pb := &prober{http: newProbeHTTPClient(), recorder: record.NewFakeRecorder(10), userAgent: "kube-probe/1.32"}
	c := &v1.Container{Name: "main", ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("missing")}}}}
	if _, err := pb.probe(context.Background(), readiness, &v1.Pod{}, v1.PodStatus{PodIP: "127.0.0.1"}, c, container.ContainerID{}); err == nil {
		t.Error("a probe naming an unknown port must be an error, not a result")
	}
}
