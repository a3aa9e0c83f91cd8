package tainteviction

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

var unreachable = v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}

// TestTaintEviction runs the controller against a real apiserver with a fake clock:
// pods on a node tainted NoExecute are deleted at once, after their tolerationSeconds,
// or never, and a taint lifted in time cancels the deletion.
func TestTaintEviction(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	factory := informers.NewSharedInformerFactory(client, 0)
	t.Cleanup(factory.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := testingclock.NewFakeClock(time.Now())
	tc, err := New(factory.Core().V1().Pods(), factory.Core().V1().Nodes(), client, record.NewFakeRecorder(100), clk, noop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { tc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, name := range []string{"dead", "flaky"} {
		if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tolerate := func(seconds *int64) []v1.Toleration {
		return []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}}
	}
	pods := []struct {
		name, node  string
		tolerations []v1.Toleration
	}{
		{"defaulted", "dead", nil}, // admission gives it 300 s
		{"five-seconds", "dead", tolerate(ptr.To[int64](5))},
		{"forever", "dead", tolerate(nil)},
		{"flaky-five-seconds", "flaky", tolerate(ptr.To[int64](5))},
	}
	for _, p := range pods {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: p.name},
			Spec: v1.PodSpec{NodeName: p.node, Tolerations: p.tolerations, Containers: []v1.Container{{Name: "c", Image: "nginx"}}}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("pods in the cache", func() bool {
		for _, p := range pods {
			if _, err := tc.podLister.Pods("default").Get(p.name); err != nil {
				return false
			}
		}
		return true
	})
	evicted := func(name string) bool {
		pod, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil)
	}
	taint := func(node string, taints ...v1.Taint) {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = taints
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scheduled := func(name string) (time.Time, bool) {
		_, fireAt, ok := tc.taintEvictionQueue.Scheduled(types.NamespacedName{Namespace: "default", Name: name})
		return fireAt, ok
	}

	taintedAt := clk.Now()
	taint("dead", unreachable)
	taint("flaky", unreachable)
	poll("evictions scheduled", func() bool {
		_, a := scheduled("five-seconds")
		_, b := scheduled("defaulted")
		_, c := scheduled("flaky-five-seconds")
		return a && b && c
	})
	for name, want := range map[string]time.Duration{"five-seconds": 5 * time.Second, "defaulted": 300 * time.Second} {
		if fireAt, _ := scheduled(name); !fireAt.Equal(taintedAt.Add(want)) {
			t.Errorf("%s is deleted at +%s, want +%s", name, fireAt.Sub(taintedAt), want)
		}
	}
	if _, ok := scheduled("forever"); ok {
		t.Error("a pod tolerating the taint forever is scheduled for deletion")
	}

	// The flaky node recovers in time: its pod's deletion is cancelled.
	taint("flaky")
	poll("cancelled eviction", func() bool { _, ok := scheduled("flaky-five-seconds"); return !ok })

	clk.Step(5 * time.Second)
	poll("five-seconds evicted", func() bool { return evicted("five-seconds") })
	pod, err := client.CoreV1().Pods("default").Get(ctx, "five-seconds", metav1.GetOptions{})
	if err == nil && !hasDisruptionTarget(pod) {
		t.Errorf("evicted pod's conditions = %+v, want DisruptionTarget DeletionByTaintManager", pod.Status.Conditions)
	}
	for _, name := range []string{"defaulted", "forever", "flaky-five-seconds"} {
		if evicted(name) {
			t.Errorf("%s was evicted at +5 s", name)
		}
	}
	clk.Step(295 * time.Second)
	poll("defaulted evicted at +300 s", func() bool { return evicted("defaulted") })
	if evicted("forever") {
		t.Error("the pod tolerating forever was evicted")
	}

	// A NoExecute taint nobody tolerates evicts at once.
	taint("dead", unreachable, v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoExecute})
	poll("untolerated taint evicts forever", func() bool { return evicted("forever") })
}

func hasDisruptionTarget(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Reason == "DeletionByTaintManager" {
			return true
		}
	}
	return false
}

func TestGetMinTolerationTime(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tolerations []v1.Toleration
		want        time.Duration
	}{
		{"no tolerations is now", nil, 0},
		{"no seconds is forever", []v1.Toleration{{}}, -1},
		{"the smallest wins", []v1.Toleration{{TolerationSeconds: ptr.To[int64](30)}, {TolerationSeconds: ptr.To[int64](10)}, {}}, 10 * time.Second},
		{"negative is now", []v1.Toleration{{TolerationSeconds: ptr.To[int64](-5)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := getMinTolerationTime(tc.tolerations); got != tc.want {
				t.Errorf("getMinTolerationTime = %v, want %v", got, tc.want)
			}
		})
	}
}
