package cache

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"skiff.dev/services/scheduler/framework"
)

func testNode(name, cpu string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:  resource.MustParse(cpu),
			v1.ResourcePods: resource.MustParse("110"),
		}},
	}
}

func testPod(name, node, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

func requestedMilliCPU(t *testing.T, c Cache, node string) int64 {
	t.Helper()
	s := NewEmptySnapshot()
	c.UpdateSnapshot(s)
	n := s.Get(node)
	if n == nil {
		t.Fatalf("node %q not in snapshot", node)
	}
	return n.Requested.MilliCPU
}

func TestAssumedPodCountsUntilForgotten(t *testing.T) {
	c := New()
	c.AddNode(testNode("n1", "2"))
	pod := testPod("p", "n1", "1500m")
	if err := c.AssumePod(pod); err != nil {
		t.Fatal(err)
	}
	if !c.IsAssumedPod(pod) {
		t.Fatal("pod not reported assumed")
	}
	if got := requestedMilliCPU(t, c, "n1"); got != 1500 {
		t.Fatalf("requested %dm after assume, want 1500m", got)
	}
	if err := c.AssumePod(pod); err == nil {
		t.Fatal("assuming the same pod twice succeeded")
	}
	if err := c.ForgetPod(pod); err != nil {
		t.Fatal(err)
	}
	if c.IsAssumedPod(pod) || requestedMilliCPU(t, c, "n1") != 0 {
		t.Fatal("forgotten pod still accounted")
	}
}

func TestAssumeKeepsTheNextPodFromTakingTheSameRoom(t *testing.T) {
	c := New()
	c.AddNode(testNode("n1", "2"))
	if err := c.AssumePod(testPod("first", "n1", "1500m")); err != nil {
		t.Fatal(err)
	}
	s := NewEmptySnapshot()
	c.UpdateSnapshot(s)
	n := s.Get("n1")
	if free := n.Allocatable.MilliCPU - n.Requested.MilliCPU; free >= 1500 {
		t.Fatalf("second pod would see %dm free; the assumed pod is not counted", free)
	}
}

func TestInformerAddConfirmsAssumedPod(t *testing.T) {
	c := New()
	c.AddNode(testNode("n1", "2"))
	c.AddNode(testNode("n2", "2"))
	assumed := testPod("p", "n1", "1")
	c.AssumePod(assumed)
	// The apiserver is the truth: if the pod landed elsewhere, move it.
	bound := testPod("p", "n2", "1")
	if err := c.AddPod(bound); err != nil {
		t.Fatal(err)
	}
	if c.IsAssumedPod(bound) {
		t.Fatal("pod still assumed after the informer saw it bound")
	}
	if requestedMilliCPU(t, c, "n1") != 0 || requestedMilliCPU(t, c, "n2") != 1000 {
		t.Fatal("confirmed pod accounted on the wrong node")
	}
	if err := c.ForgetPod(bound); err == nil {
		t.Fatal("forgetting a confirmed pod succeeded")
	}
	if err := c.RemovePod(bound); err != nil || c.PodCount() != 0 || requestedMilliCPU(t, c, "n2") != 0 {
		t.Fatalf("remove: %v, %d pods left", err, c.PodCount())
	}
}

func TestAssumedPodExpiresOnlyAfterBindingFinishedAndTTL(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New(WithClock(clock), WithAssumedPodTTL(time.Minute)).(*cacheImpl)
	c.AddNode(testNode("n1", "2"))
	pod := testPod("p", "n1", "1")
	c.AssumePod(pod)
	clock.Step(time.Hour)
	c.cleanupAssumedPods(clock.Now())
	if !c.IsAssumedPod(pod) {
		t.Fatal("pod expired while its binding was still in flight")
	}
	c.FinishBinding(pod)
	clock.Step(59 * time.Second)
	c.cleanupAssumedPods(clock.Now())
	if !c.IsAssumedPod(pod) {
		t.Fatal("pod expired before its TTL")
	}
	clock.Step(2 * time.Second)
	c.cleanupAssumedPods(clock.Now())
	if c.IsAssumedPod(pod) || c.PodCount() != 0 {
		t.Fatal("pod did not expire after its TTL")
	}
}

func TestPodsOfAnUnknownNodeAreKeptButNotScheduledOn(t *testing.T) {
	c := New()
	c.AddPod(testPod("p", "later", "1"))
	s := NewEmptySnapshot()
	c.UpdateSnapshot(s)
	if s.NumNodes() != 0 {
		t.Fatal("a node known only from its pods is in the snapshot")
	}
	c.AddNode(testNode("later", "2"))
	if got := requestedMilliCPU(t, c, "later"); got != 1000 {
		t.Fatalf("requested %dm, want the earlier pod's 1000m", got)
	}
	c.RemoveNode(testNode("later", "2"))
	c.UpdateSnapshot(s)
	if s.NumNodes() != 0 || c.NodeCount() != 0 {
		t.Fatal("removed node still listed")
	}
}

func TestSnapshotCopiesOnlyChangedNodes(t *testing.T) {
	c := New()
	c.AddNode(testNode("a", "2"))
	c.AddNode(testNode("b", "2"))
	s := NewEmptySnapshot()
	c.UpdateSnapshot(s)
	a, b := s.Get("a"), s.Get("b")
	c.AddPod(testPod("p", "b", "1"))
	c.UpdateSnapshot(s)
	if s.Get("a") != a {
		t.Error("unchanged node was copied again")
	}
	if s.Get("b") == b || b.Requested.MilliCPU != 0 {
		t.Error("changed node was not re-copied, or the old snapshot was mutated")
	}
	names := []string{}
	for _, n := range s.List() {
		names = append(names, n.Node().Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Errorf("snapshot order %v, want [a b]", names)
	}
}

func TestAllocatableFallsBackToCapacity(t *testing.T) {
	c := New()
	n := testNode("n", "4")
	n.Status.Capacity, n.Status.Allocatable = n.Status.Allocatable, nil
	c.AddNode(n)
	s := NewEmptySnapshot()
	c.UpdateSnapshot(s)
	if got := s.Get("n").Allocatable; !reflect.DeepEqual(got, framework.Resource{MilliCPU: 4000, AllowedPodNumber: 110}) {
		t.Fatalf("allocatable %+v", got)
	}
}
