package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/tests/bench"
	"skiff.dev/tests/internal/skifftest"
)

var skiffBinary string

func TestMain(m *testing.M) { skifftest.Main(m, &skiffBinary) }

// TestBenchmarkRunsAgainstSkiff runs the benchmark once at a small size against the
// all-in-one with simulated containers and 10 hollow nodes, to prove both work end to
// end; the figures themselves come from `make bench-e2e`, never from a test.
func TestBenchmarkRunsAgainstSkiff(t *testing.T) {
	c := skifftest.Start(t, skiffBinary, "--runtime", "sim", "--node-name", "bench", "--hollow-nodes", "10")
	client := c.Client

	// The bench node and hollow-0 … hollow-9, each through its own TLS bootstrap.
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == 11, nil
	}); err != nil {
		t.Fatalf("11 Ready nodes (bench, hollow-0 … hollow-9): %v", err)
	}

	// Hollow nodes mount nothing (kubemark's FakeMounter): a pod's service account token
	// volume, a tmpfs on a real node, is a plain directory under the hollow node's root.
	hollowPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-hollow-0", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: "hollow-0", Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), hollowPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "on-hollow-0", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && len(p.Spec.Volumes) > 0, nil
	}); err != nil {
		t.Fatalf("a pod with a token volume Running on hollow-0: %v", err)
	}
	// Its events reach the API through NATS, as every skiff kubelet's do: no component
	// POSTed one.
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=on-hollow-0,reason=Started"})
		return err == nil && len(events.Items) == 1 && events.Items[0].Source.Host == "hollow-0", nil
	}); err != nil {
		t.Fatalf("hollow-0's Started event for its pod: %v", err)
	}
	metrics, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="events"`) && strings.Contains(line, `verb="POST"`) {
			t.Errorf("events were POSTed, want them all published to NATS: %s", line)
		}
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	hollowDir := filepath.Join(c.DataDir, "hollow") + "/"
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], hollowDir) {
			t.Errorf("a hollow node mounted %s", f[4])
		}
	}

	res, err := bench.Run(context.Background(), bench.Config{Client: client, Namespace: "bench", Pods: 200, Creators: 10,
		Image: "pause", Processes: map[string]int{"skiff": c.Cmd.Process.Pid}, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(res)
	t.Logf("%s", line)
	if res.Nodes < 2 {
		t.Errorf("want the pods spread over the hollow nodes too, got %d node(s)", res.Nodes)
	}
	if res.Errors != 0 || res.PodsPerSecond <= 0 {
		t.Errorf("want every pod created and Running, got %s", line)
	}
	if !(0 < res.SchedulingMs.P50 && res.SchedulingMs.P50 <= res.StartupMs.P50 && res.StartupMs.P50 <= res.StartupMs.P99) {
		t.Errorf("latencies out of order (0 < scheduling p50 ≤ startup p50 ≤ p99): %s", line)
	}
	if usage := res.Processes["skiff"]; usage.PeakRSSMiB <= 0 || usage.CPUSeconds <= 0 ||
		!(0 < usage.CPUSecondsToRunning && usage.CPUSecondsToRunning <= usage.CPUSeconds) {
		t.Errorf("skiff's resource use not read (want 0 < CPU to Running ≤ CPU): %+v", usage)
	}
	if res.SettledMs < 1000 {
		t.Errorf("want the processes read after at least one quiet second, settled after %.0f ms", res.SettledMs)
	}
	if !(0 < res.DeleteCollectionMs && res.DeleteCollectionMs <= res.AllGoneMs) {
		t.Errorf("want 0 < DeleteCollection ≤ all gone: %s", line)
	}
	pods, err := client.CoreV1().Pods("bench").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left after the run, want every one gone (the kubelets delete them)", len(pods.Items))
	}
}
