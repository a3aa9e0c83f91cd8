package nodelifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// testConfig is kube's defaults.
var testConfig = Config{
	NodeMonitorPeriod: 5 * time.Second, NodeMonitorGracePeriod: 40 * time.Second, NodeStartupGracePeriod: time.Minute,
	EvictionLimiterQPS: 0.1, SecondaryEvictionLimiterQPS: 0.01, LargeClusterThreshold: 50, UnhealthyZoneThreshold: 0.55,
}

type fixture struct {
	nc     *Controller
	client kubernetes.Interface
	clock  *testingclock.FakeClock
	ctx    context.Context
}

// newFixture runs a real apiserver and builds the controller on informers of it, driven
// by a fake clock; the test calls the controller's passes itself.
func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	srv := controlplanetest.StartServer(t)
	client := kubernetes.NewForConfigOrDie(srv.Config)
	factory := informers.NewSharedInformerFactory(client, 0)
	t.Cleanup(factory.Shutdown) // after cancel: cleanups run last-registered first
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := testingclock.NewFakeClock(time.Now())
	nc, err := New(factory.Core().V1().Nodes(), factory.Coordination().V1().Leases(), factory.Core().V1().Pods(), client, record.NewFakeRecorder(100), clk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return &fixture{nc: nc, client: client, clock: clk, ctx: ctx}
}

// createNode registers a Ready node and its Lease, as a kubelet does.
func (f *fixture) createNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	now := metav1.NewTime(f.clock.Now())
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
	}}}
	if _, err := f.client.CoreV1().Nodes().Create(f.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1.NamespaceNodeLease, Name: name},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &metav1.MicroTime{Time: f.clock.Now()}}}
	if _, err := f.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(f.ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, fmt.Sprintf("node %s and its lease in the caches", name), func() bool {
		_, errN := f.nc.nodeLister.Get(name)
		_, errL := f.nc.leaseLister.Leases(v1.NamespaceNodeLease).Get(name)
		return errN == nil && errL == nil
	})
}

// renewLease renews node name's Lease at the fake clock's now, as its kubelet would.
func (f *fixture) renewLease(t *testing.T, name string) {
	t.Helper()
	leases := f.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	lease, err := leases.Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: f.clock.Now()}
	if lease, err = leases.Update(f.ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "renewed lease in the cache", func() bool {
		cached, err := f.nc.leaseLister.Leases(v1.NamespaceNodeLease).Get(name)
		return err == nil && cached.ResourceVersion == lease.ResourceVersion
	})
}

// waitNodeCache waits until the controller's cache holds node name as the apiserver does.
func (f *fixture) waitNodeCache(t *testing.T, name string) *v1.Node {
	t.Helper()
	node, err := f.client.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "node in the cache", func() bool {
		cached, err := f.nc.nodeLister.Get(name)
		return err == nil && cached.ResourceVersion == node.ResourceVersion
	})
	return node
}

func (f *fixture) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// monitor runs one health pass and lets the caches catch up with what it wrote.
func (f *fixture) monitor(t *testing.T, names ...string) {
	t.Helper()
	if err := f.nc.monitorNodeHealth(f.ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		f.waitNodeCache(t, name)
	}
}

func condition(node *v1.Node, t v1.NodeConditionType) v1.NodeCondition {
	if c := getNodeCondition(&node.Status, t); c != nil {
		return *c
	}
	return v1.NodeCondition{}
}

func hasTaint(node *v1.Node, key string, effect v1.TaintEffect) bool {
	return taintExists(node.Spec.Taints, &v1.Taint{Key: key, Effect: effect})
}

func TestNodeWithoutLeaseRenewalBecomesUnknownTaintedAndRecovers(t *testing.T) {
	f := newFixture(t, testConfig)
	f.createNode(t, "healthy", nil)
	f.createNode(t, "worker", nil)
	f.createReadyPod(t, "web", "worker")

	f.monitor(t, "worker") // first sight: alive now
	// Renewals keep the node Ready however long its status goes unposted.
	for range 3 {
		f.clock.Step(30 * time.Second)
		f.renewLease(t, "worker")
		f.renewLease(t, "healthy")
		f.monitor(t, "worker")
	}
	node := f.waitNodeCache(t, "worker")
	if c := condition(node, v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Fatalf("Ready with a renewed lease = %s, want True", c.Status)
	}

	// 40 s without renewal is still within the grace period; past it the node is Unknown.
	f.clock.Step(40 * time.Second)
	f.renewLease(t, "healthy")
	f.monitor(t, "worker")
	if c := condition(f.waitNodeCache(t, "worker"), v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Fatalf("Ready at exactly the grace period = %s, want True", c.Status)
	}
	f.clock.Step(time.Second)
	f.renewLease(t, "healthy")
	f.monitor(t, "worker")
	node = f.waitNodeCache(t, "worker")
	for _, ct := range []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure} {
		c := condition(node, ct)
		if c.Status != v1.ConditionUnknown || c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
			t.Errorf("%s = %s %q %q, want Unknown NodeStatusUnknown %q", ct, c.Status, c.Reason, c.Message, "Kubelet stopped posting node status.")
		}
	}
	for _, ct := range []v1.NodeConditionType{v1.NodeDiskPressure, v1.NodePIDPressure} {
		if c := condition(node, ct); c.Status != v1.ConditionUnknown || c.Reason != "NodeStatusNeverUpdated" {
			t.Errorf("never-posted %s = %s %q, want Unknown NodeStatusNeverUpdated", ct, c.Status, c.Reason)
		}
	}
	got, err := f.client.CoreV1().Pods("default").Get(f.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podReady(got) {
		t.Errorf("pod on the unreachable node is still Ready")
	}

	// The NoSchedule taint follows the condition; the NoExecute one comes from the
	// rate-limited queue, which the node joins on the next pass that sees it Unknown.
	f.clock.Step(5 * time.Second)
	f.renewLease(t, "healthy")
	f.monitor(t, "worker")
	if err := f.nc.doNoScheduleTaintingPass(f.ctx, "worker"); err != nil {
		t.Fatal(err)
	}
	f.nc.doNoExecuteTaintingPass(f.ctx)
	node = f.waitNodeCache(t, "worker")
	if !hasTaint(node, v1.TaintNodeUnreachable, v1.TaintEffectNoSchedule) || !hasTaint(node, v1.TaintNodeUnreachable, v1.TaintEffectNoExecute) {
		t.Fatalf("taints = %v, want unreachable NoSchedule and NoExecute", node.Spec.Taints)
	}
	if hasTaint(node, v1.TaintNodeNotReady, v1.TaintEffectNoExecute) {
		t.Errorf("taints = %v: not-ready and unreachable are exclusive", node.Spec.Taints)
	}

	// The kubelet comes back: a fresh Ready status and Lease lift every taint.
	f.clock.Step(time.Minute)
	f.setNodeReady(t, "worker", v1.ConditionTrue)
	f.renewLease(t, "worker")
	f.renewLease(t, "healthy")
	f.monitor(t, "worker")
	if err := f.nc.doNoScheduleTaintingPass(f.ctx, "worker"); err != nil {
		t.Fatal(err)
	}
	node = f.waitNodeCache(t, "worker")
	if len(node.Spec.Taints) != 0 {
		t.Errorf("taints after recovery = %v, want none", node.Spec.Taints)
	}
	if c := condition(node, v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready after recovery = %s, want True", c.Status)
	}
}

// createReadyPod creates pod default/name bound to node, Running and Ready as its
// kubelet would report it, and waits for the controller's cache to hold it so.
func (f *fixture) createReadyPod(t *testing.T, name, node string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "nginx"}}}}
	pod, err := f.client.CoreV1().Pods("default").Create(f.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = v1.PodRunning
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	if _, err := f.client.CoreV1().Pods("default").UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "ready pod in the cache", func() bool {
		p, err := f.nc.podLister.Pods("default").Get(name)
		return err == nil && podReady(p)
	})
}

// setNodeReady writes node name's Ready condition as its kubelet would and waits for
// the controller's cache to hold it.
func (f *fixture) setNodeReady(t *testing.T, name string, status v1.ConditionStatus) {
	t.Helper()
	node, err := f.client.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(f.clock.Now())
	for i := range node.Status.Conditions {
		if c := &node.Status.Conditions[i]; c.Type == v1.NodeReady {
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime, c.LastTransitionTime = status, "KubeletNotReady", "", now, now
			if status == v1.ConditionTrue {
				c.Reason = "KubeletReady"
			}
		}
	}
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitNodeCache(t, name)
}

// TestProcessPodReadsTheNodeItself: the health map is as old as the last pass, so a pod
// on a node that was NotReady then and is Ready now is left alone; a pod on a node
// NotReady in both is marked not Ready.
func TestProcessPodReadsTheNodeItself(t *testing.T) {
	f := newFixture(t, testConfig)
	for _, name := range []string{"turned-ready", "still-not-ready"} {
		f.createNode(t, name, nil)
		f.setNodeReady(t, name, v1.ConditionFalse) // a kubelet registers NotReady
	}
	f.monitor(t, "turned-ready", "still-not-ready")
	f.setNodeReady(t, "turned-ready", v1.ConditionTrue) // after the pass, before the next

	for _, node := range []string{"turned-ready", "still-not-ready"} {
		f.createReadyPod(t, node, node)
		if err := f.nc.processPod(f.ctx, podUpdateItem{namespace: "default", name: node}); err != nil {
			t.Fatal(err)
		}
	}
	for node, wantReady := range map[string]bool{"turned-ready": true, "still-not-ready": false} {
		got, err := f.client.CoreV1().Pods("default").Get(f.ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if podReady(got) != wantReady {
			t.Errorf("pod on node %s: Ready %v, want %v", node, podReady(got), wantReady)
		}
	}
}

func TestNotReadyNodeGetsNotReadyTaint(t *testing.T) {
	f := newFixture(t, testConfig)
	// A healthy node too: were every node down, the controller would suspect itself
	// (full disruption) and taint nothing.
	f.createNode(t, "healthy", nil)
	f.createNode(t, "sick", nil)
	f.monitor(t, "sick")
	node := f.waitNodeCache(t, "sick")
	now := metav1.NewTime(f.clock.Now())
	node.Status.Conditions[0] = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", LastHeartbeatTime: now, LastTransitionTime: now}
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitNodeCache(t, "sick")
	f.monitor(t, "sick")
	if err := f.nc.doNoScheduleTaintingPass(f.ctx, "sick"); err != nil {
		t.Fatal(err)
	}
	f.nc.doNoExecuteTaintingPass(f.ctx)
	node = f.waitNodeCache(t, "sick")
	if !hasTaint(node, v1.TaintNodeNotReady, v1.TaintEffectNoSchedule) || !hasTaint(node, v1.TaintNodeNotReady, v1.TaintEffectNoExecute) {
		t.Errorf("taints = %v, want not-ready NoSchedule and NoExecute", node.Spec.Taints)
	}
	if hasTaint(node, v1.TaintNodeUnreachable, v1.TaintEffectNoExecute) {
		t.Errorf("taints = %v: a node that reports NotReady is not unreachable", node.Spec.Taints)
	}
}

// TestEvictionRateLimitsAndDisruptionModes pins kube's zone states: a healthy zone taints
// at --node-eviction-rate, a partially disrupted small one stops, and when every node is
// down nothing is tainted at all.
func TestEvictionRateLimitsAndDisruptionModes(t *testing.T) {
	f := newFixture(t, testConfig)
	names := []string{"n0", "n1", "n2", "n3", "n4"}
	for _, n := range names {
		f.createNode(t, n, nil)
	}
	f.monitor(t, names...)
	if st := f.nc.zoneStates[""]; st != stateNormal {
		t.Fatalf("zone state with every node Ready = %s, want Normal", st)
	}

	// Two of five silent: the zone stays Normal (more than two are needed), and they are
	// tainted one per 10 s.
	f.clock.Step(41 * time.Second)
	for _, n := range names[2:] {
		f.renewLease(t, n)
	}
	f.monitor(t, names...)
	if st := f.nc.zoneStates[""]; st != stateNormal {
		t.Fatalf("zone state with 2 of 5 down = %s, want Normal", st)
	}
	f.monitor(t, names...) // this pass sees them Unknown and queues them
	tainted := func() int {
		count := 0
		for _, n := range names {
			if hasTaint(f.waitNodeCache(t, n), v1.TaintNodeUnreachable, v1.TaintEffectNoExecute) {
				count++
			}
		}
		return count
	}
	f.nc.doNoExecuteTaintingPass(f.ctx)
	if got := tainted(); got != 1 {
		t.Fatalf("NoExecute-tainted nodes after the first pass = %d, want 1 (0.1 nodes/s)", got)
	}
	f.clock.Step(5 * time.Second)
	f.nc.doNoExecuteTaintingPass(f.ctx)
	if got := tainted(); got != 1 {
		t.Fatalf("tainted 5 s later = %d, want still 1", got)
	}
	f.clock.Step(5 * time.Second)
	f.nc.doNoExecuteTaintingPass(f.ctx)
	if got := tainted(); got != 2 {
		t.Fatalf("tainted 10 s later = %d, want 2", got)
	}

	// Three of five (60% ≥ 55%): partial disruption in a small cluster stops tainting.
	f.clock.Step(31 * time.Second)
	for _, n := range names[3:] {
		f.renewLease(t, n)
	}
	f.monitor(t, names...)
	if st := f.nc.zoneStates[""]; st != statePartialDisruption {
		t.Fatalf("zone state with 3 of 5 down = %s, want PartialDisruption", st)
	}
	if qps := f.nc.zoneNoExecuteTainter[""].QPS(); qps != 0 {
		t.Errorf("tainting rate in a partially disrupted small zone = %v, want 0", qps)
	}

	// All down: full disruption everywhere lifts the NoExecute taints.
	f.clock.Step(41 * time.Second)
	f.monitor(t, names...)
	if st := f.nc.zoneStates[""]; st != stateFullDisruption {
		t.Fatalf("zone state with every node down = %s, want FullDisruption", st)
	}
	if got := tainted(); got != 0 {
		t.Errorf("NoExecute-tainted nodes in full disruption = %d, want 0", got)
	}
	f.clock.Step(time.Minute)
	f.nc.doNoExecuteTaintingPass(f.ctx)
	if got := tainted(); got != 0 {
		t.Errorf("tainted a minute into full disruption = %d, want 0", got)
	}
}

func TestComputeZoneState(t *testing.T) {
	ready := &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue}
	unknown := &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown}
	nc := &Controller{cfg: testConfig}
	for _, tc := range []struct {
		name       string
		conditions []*v1.NodeCondition
		want       ZoneState
		unhealthy  int
	}{
		{"all ready is normal", []*v1.NodeCondition{ready, ready}, stateNormal, 0},
		{"none ready is full disruption", []*v1.NodeCondition{unknown, nil}, stateFullDisruption, 2},
		{"two down is never partial", []*v1.NodeCondition{unknown, unknown, ready}, stateNormal, 2},
		{"three of five down is partial", []*v1.NodeCondition{unknown, unknown, unknown, ready, ready}, statePartialDisruption, 3},
		{"three of six down is below 55%", []*v1.NodeCondition{unknown, unknown, unknown, ready, ready, ready}, stateNormal, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unhealthy, state := nc.computeZoneState(tc.conditions)
			if state != tc.want || unhealthy != tc.unhealthy {
				t.Errorf("computeZoneState = %d, %s; want %d, %s", unhealthy, state, tc.unhealthy, tc.want)
			}
		})
	}
}

func TestReducedQPS(t *testing.T) {
	nc := &Controller{cfg: testConfig}
	if got := nc.reducedQPS(50); got != 0 {
		t.Errorf("partial disruption rate at 50 nodes = %v, want 0", got)
	}
	if got := nc.reducedQPS(51); got != testConfig.SecondaryEvictionLimiterQPS {
		t.Errorf("partial disruption rate at 51 nodes = %v, want the secondary rate", got)
	}
}
