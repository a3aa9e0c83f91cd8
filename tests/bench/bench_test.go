package bench_test

import (
	"context"
	"encoding/json"
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
	if usage := res.Processes["skiff"]; usage.PeakRSSMiB <= 0 || usage.CPUSeconds <= 0 {
		t.Errorf("skiff's resource use not read: %+v", usage)
	}
	pods, err := client.CoreV1().Pods("bench").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s not deleted by the benchmark's DeleteCollection", p.Name)
		}
	}
}
